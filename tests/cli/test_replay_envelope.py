"""``dlq replay`` of envelope dead letters: through a dispatcher over the service's store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Invoke
from tests.cli.order_logic import logic
from tests.cli.test_dlq import one_error_line
from tests.contract_dead_letters import make_record
from xsm_celery.engine import create_machine
from xsm_celery.patterns.dead_letter import DeadLetter
from xsm_celery.persistence import SQLiteInbox, SQLiteStore
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore

CHART = Path(__file__).with_name("order.json")
LOGIC = "tests.cli.order_logic"


class Env:
    """A dead-letter store, a state store and the arguments that tie them together."""

    def __init__(self, tmp_path: Path) -> None:
        self.dlq = SQLAlchemyDeadLetterStore(f"sqlite:///{tmp_path / 'dlq.db'}")
        self.state_path = tmp_path / "state.db"
        self.state = SQLiteStore(self.state_path)
        SQLiteInbox(self.state)
        self.machine = create_machine(CHART, logic=logic)

    def record(self, *, data: dict[str, Any] | None = None, **overrides: Any) -> DeadLetter:
        """Store an envelope dead letter for order o-1 captured from the current chart."""
        values: dict[str, Any] = {
            "reason": "max_attempts",
            "machine_id": "order",
            "state_id": "order.new",
            "machine_hash": self.machine.structure_hash,
            "machine_version": "3",
            "envelope": {
                "specversion": "1.0",
                "id": "env-1",
                "source": "/shop",
                "type": "xsm.order.PAY",
                "subject": "o-1",
                "datacontenttype": "application/json",
                "data": data if data is not None else {"amount": 12},
            },
            "topic": "orders",
            "task_name": None,
            "task_id": None,
            "task_args": None,
            "task_kwargs": None,
            "hostname": None,
        }
        values.update(overrides)
        record = make_record(**values)
        self.dlq.put(record)
        return record

    def args(self, record_id: str, *extra: str) -> list[str]:
        """``dlq --dlq ... replay ID --store ... --machine ... --logic ...`` plus ``extra``."""
        return [
            "dlq",
            "--dlq",
            f"sqlite:///{self.dlq.engine.url.database}",
            "replay",
            record_id,
            "--store",
            f"sqlite:///{self.state_path}",
            "--machine",
            str(CHART),
            "--logic",
            LOGIC,
            *extra,
        ]


@pytest.fixture
def env(tmp_path: Path) -> Env:
    """Empty stores for one test."""
    return Env(tmp_path)


REAL = ("--no-dry-run", "--yes", "--reason", "processor fixed")


def test_a_dry_run_checks_and_sends_nothing(invoke: Invoke, env: Env) -> None:
    """A dry run exits 0, saves no instance and leaves the record open (audited dry_run)."""
    record = env.record()
    result = invoke(*env.args(record.id, "--json"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outcome"] == "dry_run"
    assert env.state.load("o-1") is None
    assert env.dlq.get(record.id).resolved_at is None  # type: ignore[union-attr]


def test_a_real_replay_processes_the_envelope_and_resolves(invoke: Invoke, env: Env) -> None:
    """The envelope reaches the machine, the instance is saved, the record is resolved."""
    record = env.record()
    result = invoke(*env.args(record.id, *REAL, "--json"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outcome"] == "processed"
    saved = env.state.load("o-1")
    assert saved is not None
    assert json.loads(saved.snapshot)["context"]["paid"] == 12
    assert env.dlq.get(record.id).resolved_at is not None  # type: ignore[union-attr]
    assert env.dlq.audit_log(record.id)[-1]["outcome"] == "processed"


def test_a_double_replay_is_a_duplicate(invoke: Invoke, env: Env) -> None:
    """The envelope id is reused, so the inbox answers a second replay as a duplicate."""
    record = env.record()
    assert invoke(*env.args(record.id, *REAL)).exit_code == 0
    again = invoke(*env.args(record.id, *REAL, "--json"))
    assert again.exit_code == 0
    assert json.loads(again.stdout)["outcome"] == "duplicate"
    saved = env.state.load("o-1")
    assert saved is not None
    assert json.loads(saved.snapshot)["context"]["paid"] == 12


def test_a_replay_that_fails_again_exits_1(invoke: Invoke, env: Env) -> None:
    """When the machine fails again the outcome is not processed: exit 1, record open."""
    record = env.record(data={"amount": 5, "fail": True})
    result = invoke(*env.args(record.id, *REAL, "--json"))
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["outcome"] not in ("processed", "duplicate")
    assert env.dlq.get(record.id).resolved_at is None  # type: ignore[union-attr]


def test_a_changed_chart_needs_force(invoke: Invoke, env: Env) -> None:
    """A record captured from another chart structure is refused (exit 2) unless --force."""
    record = env.record(machine_hash="an-older-structure")
    refused = invoke(*env.args(record.id, *REAL))
    assert refused.exit_code == 2
    assert "--force" in one_error_line(refused)
    forced = invoke(*env.args(record.id, *REAL, "--force"))
    assert forced.exit_code == 0, forced.output
    assert "structure changed" in forced.stderr


def test_no_machine_for_the_type_exits_2(invoke: Invoke, env: Env) -> None:
    """A record of a machine none of the --machine charts is refused with the seed's words."""
    record = env.record(
        machine_id="invoice",
        envelope={
            "specversion": "1.0",
            "id": "env-9",
            "source": "/b",
            "type": "billing.INVOICE",
            "subject": "i-1",
            "data": {},
        },
    )
    result = invoke(*env.args(record.id, *REAL))
    assert result.exit_code == 2
    assert "no machine handles type 'billing.INVOICE'" in one_error_line(result)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--logic", "no_such_module_xyz", "cannot import --logic"),
        ("--logic", "tests.cli.proj", "is not a MachineLogic"),
        ("--machine", "missing.json", "cannot load machine"),
        ("--store", "sqlite:///nowhere/state.db", "no such --store SQLite database file"),
        ("--store", "redis://127.0.0.1/0", "unsupported --store URL"),
    ],
)
def test_bad_replay_inputs_exit_2(
    invoke: Invoke, env: Env, flag: str, value: str, message: str
) -> None:
    """An unloadable --logic or --machine, or a missing --store, is refused input."""
    record = env.record()
    args = env.args(record.id, *REAL)
    args[args.index(flag) + 1] = value
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in one_error_line(result)
    assert not Path("nowhere").exists()


def test_a_store_file_that_is_not_a_database_exits_2(
    invoke: Invoke, env: Env, tmp_path: Path
) -> None:
    """A --store file that is not SQLite is refused and left as it was."""
    record = env.record()
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n" * 100)
    args = env.args(record.id, *REAL)
    args[args.index("--store") + 1] = f"sqlite:///{notes}"
    result = invoke(*args)
    assert result.exit_code == 2
    assert "not a database" in one_error_line(result)
    assert notes.read_text().startswith("not a database")


def test_without_envelope_replay_in_the_installation_exits_2(
    invoke: Invoke, env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installation whose eda lacks replay_dead_letter says so instead of crashing."""
    import xsm_celery.eda

    monkeypatch.delattr(xsm_celery.eda, "replay_dead_letter")
    record = env.record()
    result = invoke(*env.args(record.id))
    assert result.exit_code == 2
    assert "xsm_celery.eda.replay_dead_letter" in one_error_line(result)
