"""Each command's errors carry its own name; ``--logic`` imports from the current folder;
``simulate`` without logic names the unresolved delays in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import Invoke

SCRIPT = Path(sys.executable).parent / "xsm-celery"

DELAY_CHART = {
    "id": "parcel",
    "initial": "waiting",
    "states": {
        "waiting": {"after": {"pickup_window": "late"}, "on": {"PICKED": "moving"}},
        "moving": {"after": {"transit_window": "late"}, "on": {"DELIVERED": "done"}},
        "late": {},
        "done": {"type": "final"},
    },
}


def _only_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "prefix"),
    [
        (("status",), "xsm status: error: no store to read"),
        (("status", "--dlq", "memory://x"), "xsm status: error: --dlq memory://x"),
        (("status", "--bogus"), "xsm status: error: No such option '--bogus'"),
        (("inspect", "no-such-chart.json"), "xsm inspect: error: cannot read chart"),
        (("dlq", "--dlq", "memory://x", "list"), "xsm dlq: error: --dlq memory://x"),
        (("breakers",), "xsm breakers: error: no fleet Redis"),
        (("no-such-command",), "xsm: error: No such command 'no-such-command'"),
    ],
)
def test_an_error_names_its_command(
    invoke: Invoke, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], prefix: str
) -> None:
    """The one-line refusal starts with the command that refused, exit status 2."""
    monkeypatch.delenv("XSM_REDIS_URL", raising=False)
    monkeypatch.delenv("XSM_DLQ", raising=False)
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert _only_line(result.stderr).startswith(prefix)


def _script(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(SCRIPT), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_logic_imports_from_the_current_folder(tmp_path: Path) -> None:
    """``--logic parcels.logic`` works from the project folder without PYTHONPATH."""
    (tmp_path / "parcel.json").write_text(json.dumps(DELAY_CHART))
    package = tmp_path / "parcels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "logic.py").write_text(
        "from xsm_celery.engine import MachineLogic\n"
        "logic = MachineLogic(delays={'pickup_window': 1000, 'transit_window': 2000})\n"
    )
    done = _script(
        tmp_path, "simulate", "parcel.json", "--events", "PICKED", "--logic", "parcels.logic"
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.strip().splitlines()[-1] == "# -> parcel.moving"


@pytest.mark.slow
def test_simulate_without_logic_names_the_unresolved_delays_once(tmp_path: Path) -> None:
    """No traceback: one note lists both named delays, and the events still run."""
    (tmp_path / "parcel.json").write_text(json.dumps(DELAY_CHART))
    done = _script(tmp_path, "simulate", "parcel.json", "--events", "PICKED,DELIVERED")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    line = _only_line(done.stderr)
    assert line.startswith("xsm simulate: note: named delays left unresolved")
    assert line.endswith("pickup_window, transit_window")
    assert done.stdout.strip().splitlines()[-1] == "# -> parcel.done"


TYPO_APP = """
from celery import Celery

from xsm_celery.celery import ChartTask

app = Celery("typo", broker="memory://")
app.conf.xsm_dead_leter_store = "sqlite:///dead_letters.db"


@app.task(base=ChartTask, name="typo.charge")
def charge() -> None:
    pass
"""


@pytest.mark.slow
def test_a_misspelled_setting_gets_did_you_mean_without_a_chained_traceback(
    tmp_path: Path,
) -> None:
    """The worker stops on the setting's own error; the CLI says it in one line."""
    (tmp_path / "typo_app.py").write_text(TYPO_APP)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    celery = [sys.executable, "-m", "celery", "-A", "typo_app"]
    worker = subprocess.run(
        [*celery, "worker", "-P", "solo", "-l", "WARNING"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert worker.returncode != 0
    assert "did you mean 'xsm_dead_letter_store'?" in worker.stderr
    assert "During handling of the above exception" not in worker.stderr
    assert "direct cause of the following exception" not in worker.stderr
    assert worker.stderr.count("Traceback (most recent call last)") == 1
    status = subprocess.run(
        [*celery, "xsm", "status", "--no-workers"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 2
    line = _only_line(status.stderr)
    assert line.startswith("xsm status: error: unknown Celery setting 'xsm_dead_leter_store'")
    assert "did you mean 'xsm_dead_letter_store'?" in line
