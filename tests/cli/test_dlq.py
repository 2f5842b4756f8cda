"""``xsm-celery dlq``: listing, showing, purging and resolving, with the seed's exit codes."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import given
from hypothesis import strategies as st

from tests.cli.conftest import Invoke, Seeded
from xsm_celery.cli.base import CliError
from xsm_celery.cli.dlq import parse_age


def one_error_line(result: Result) -> str:
    """The single stderr line of a refused command (and nothing on stdout)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("xsm dlq: error: ")
    assert result.stdout == ""
    return lines[0]


class TestList:
    """dlq list."""

    def test_lists_unresolved_records_newest_first(self, invoke: Invoke, seeded: Seeded) -> None:
        """The table has every unresolved id, newest first, and leaves resolved ones out."""
        result = invoke("dlq", "--dlq", seeded.url, "list")
        assert result.exit_code == 0, result.output
        positions = [
            result.stdout.index(r.id)
            for r in (seeded.task, seeded.envelope, seeded.chart, seeded.old)
        ]
        assert positions == sorted(positions)
        assert seeded.resolved.id not in result.stdout
        assert "dead letters (4)" in result.stdout

    def test_all_includes_resolved_records(self, invoke: Invoke, seeded: Seeded) -> None:
        """--all adds resolved records."""
        result = invoke("dlq", "--dlq", seeded.url, "list", "--all")
        assert result.exit_code == 0
        assert seeded.resolved.id in result.stdout

    def test_json_is_count_and_records(self, invoke: Invoke, seeded: Seeded) -> None:
        """--json prints {count, dead_letters} that parses back into the stored records."""
        result = invoke("dlq", "--dlq", seeded.url, "list", "--json")
        assert result.exit_code == 0
        data = json.loads(result.stdout)
        assert data["count"] == 4
        assert data["dead_letters"][0] == seeded.store.get(seeded.task.id).to_dict()  # type: ignore[union-attr]
        all_data = json.loads(invoke("dlq", "--dlq", seeded.url, "list", "--all", "--json").stdout)
        assert all_data["count"] == 5

    def test_limit_caps_the_list(self, invoke: Invoke, seeded: Seeded) -> None:
        """--limit 2 returns the two newest records."""
        data = json.loads(
            invoke("dlq", "--dlq", seeded.url, "list", "--limit", "2", "--json").stdout
        )
        assert [r["id"] for r in data["dead_letters"]] == [seeded.task.id, seeded.envelope.id]

    @pytest.mark.parametrize("limit", ["0", "-3"])
    def test_a_bad_limit_exits_2(self, invoke: Invoke, seeded: Seeded, limit: str) -> None:
        """A limit below 1 is refused input."""
        result = invoke("dlq", "--dlq", seeded.url, "list", "--limit", limit, "--json")
        assert result.exit_code == 2
        assert "--limit" in one_error_line(result)

    def test_an_empty_store_says_so(self, invoke: Invoke, tmp_path: Path) -> None:
        """An existing store with no records lists nothing and exits 0."""
        from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore

        SQLAlchemyDeadLetterStore(f"sqlite:///{tmp_path / 'e.db'}").close()
        result = invoke("dlq", "--dlq", f"sqlite:///{tmp_path / 'e.db'}", "list")
        assert result.exit_code == 0
        assert "no dead letters" in result.stdout


class TestShow:
    """dlq show."""

    def test_shows_the_error_chain_and_redacted_arguments(
        self, invoke: Invoke, seeded: Seeded
    ) -> None:
        """The detail view has the fields, every error of the chain and masked secrets."""
        result = invoke("dlq", "--dlq", seeded.url, "show", seeded.task.id)
        assert result.exit_code == 0, result.output
        for text in (
            seeded.task.id,
            "shop.charge",
            "TimeoutError",
            "ValueError",
            "bad 7",
            "Error chain (oldest first)",
            "card_token",
        ):
            assert text in result.stdout
        assert "tok_live_9" not in result.stdout
        assert result.stdout.index("TimeoutError") < result.stdout.index("ValueError")

    def test_json_is_the_stored_record(self, invoke: Invoke, seeded: Seeded) -> None:
        """show --json prints exactly the stored record as JSON."""
        result = invoke("dlq", "--dlq", seeded.url, "show", seeded.envelope.id, "--json")
        assert result.exit_code == 0
        assert json.loads(result.stdout) == seeded.envelope.to_dict()

    def test_an_unknown_id_exits_2(self, invoke: Invoke, seeded: Seeded) -> None:
        """show of an id that is not in the store is refused with one line on stderr."""
        result = invoke("dlq", "--dlq", seeded.url, "show", "no-such-id", "--json")
        assert result.exit_code == 2
        assert "no dead letter with id 'no-such-id'" in one_error_line(result)

    def test_the_audit_trail_is_shown(self, invoke: Invoke, seeded: Seeded) -> None:
        """After a resolve, show lists the audit row with actor and reason."""
        invoke(
            "dlq",
            "--dlq",
            seeded.url,
            "resolve",
            seeded.chart.id,
            "--yes",
            "--reason",
            "fixed by hand",
            "--actor",
            "ana",
        )
        result = invoke("dlq", "--dlq", seeded.url, "show", seeded.chart.id)
        assert "Audit" in result.stdout
        assert "fixed by hand" in result.stdout
        assert "ana" in result.stdout


class TestStoreRefusals:
    """Every way to name a store that cannot be used exits 2 and creates nothing."""

    def test_a_missing_sqlite_file_exits_2_and_is_not_created(
        self, invoke: Invoke, tmp_path: Path
    ) -> None:
        """A typo in --dlq never creates an empty store that reports no dead letters."""
        path = tmp_path / "typo.db"
        result = invoke("dlq", "--dlq", f"sqlite:///{path}", "list", "--json")
        assert result.exit_code == 2
        assert "no such SQLite database file" in one_error_line(result)
        assert not path.exists()

    @pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "ftp://x/y", "dlq.db"])
    def test_an_unsupported_url_exits_2(self, invoke: Invoke, url: str) -> None:
        """A scheme other than memory, sqlite or postgresql is refused."""
        result = invoke("dlq", "--dlq", url, "list")
        assert result.exit_code == 2
        assert "unsupported dead-letter store URL" in one_error_line(result)

    def test_a_file_that_is_not_sqlite_exits_2(self, invoke: Invoke, tmp_path: Path) -> None:
        """A text file given as the store is refused, not overwritten."""
        path = tmp_path / "notes.db"
        path.write_text("shopping list\n" * 200)
        result = invoke("dlq", "--dlq", f"sqlite:///{path}", "list")
        assert result.exit_code == 2
        assert "not a database" in one_error_line(result)
        assert path.read_text().startswith("shopping list")

    def test_a_database_without_the_tables_exits_2(self, invoke: Invoke, tmp_path: Path) -> None:
        """A SQLite database that is not a dead-letter store is refused and left unchanged."""
        path = tmp_path / "other.db"
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE t (x INTEGER)")
        result = invoke("dlq", "--dlq", f"sqlite:///{path}", "list")
        assert result.exit_code == 2
        assert "no xsm_dead_letters" in one_error_line(result)
        with sqlite3.connect(path) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert "xsm_dead_letters" not in tables

    def test_no_store_named_exits_2(self, invoke: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without --dlq, XSM_DLQ or --app there is no store to open."""
        monkeypatch.delenv("XSM_DLQ", raising=False)
        result = invoke("dlq", "list")
        assert result.exit_code == 2
        assert "pass --dlq URL" in one_error_line(result)

    def test_the_store_can_come_from_the_environment(
        self, invoke: Invoke, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """XSM_DLQ stands in for --dlq."""
        monkeypatch.setenv("XSM_DLQ", seeded.url)
        result = invoke("dlq", "list", "--json")
        assert result.exit_code == 0
        assert json.loads(result.stdout)["count"] == 4

    def test_an_unknown_option_is_one_line_and_exits_2(
        self, invoke: Invoke, seeded: Seeded
    ) -> None:
        """Click's usage errors are one line too, so scripts can log them."""
        result = invoke("dlq", "--dlq", seeded.url, "list", "--bogus")
        assert result.exit_code == 2
        assert "--bogus" in one_error_line(result)

    def test_an_unknown_command_is_one_line_and_exits_2(
        self, invoke: Invoke, seeded: Seeded
    ) -> None:
        """A misspelt sub-command is refused on one line."""
        result = invoke("dlq", "--dlq", seeded.url, "lst")
        assert result.exit_code == 2
        assert "lst" in one_error_line(result)


class TestPurge:
    """dlq purge."""

    def test_purges_only_older_records_and_audits(self, invoke: Invoke, seeded: Seeded) -> None:
        """--older-than 30d --include-unresolved deletes the 90-day-old record and audits it."""
        result = invoke(
            "dlq",
            "--dlq",
            seeded.url,
            "purge",
            "--older-than",
            "30d",
            "--yes",
            "--reason",
            "retention",
            "--actor",
            "ops",
            "--include-unresolved",
            "--json",
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == {"deleted": 1}
        assert seeded.store.get(seeded.old.id) is None
        assert len(seeded.store.all()) == 4
        [entry] = seeded.store.audit_log()
        assert (entry["action"], entry["actor"], entry["reason"]) == ("purge", "ops", "retention")
        assert entry["outcome"] == "deleted 1 record(s) older than 30d"

    def test_purge_by_age_keeps_unresolved_records(self, invoke: Invoke, seeded: Seeded) -> None:
        """--older-than 0s deletes resolved records only unless --include-unresolved is given."""
        seeded.store.mark_resolved(seeded.chart.id, time.time())
        everything = seeded.store.list(include_resolved=True, limit=100)
        resolved = {r.id for r in everything if r.resolved_at is not None}
        unresolved = {r.id for r in everything} - resolved
        time.sleep(0.01)
        result = invoke(
            "dlq",
            "--dlq",
            seeded.url,
            "purge",
            "--older-than",
            "0s",
            "--yes",
            "--reason",
            "retention",
            "--json",
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == {"deleted": len(resolved)}
        assert seeded.chart.id in resolved
        left = {r.id for r in seeded.store.list(include_resolved=True, limit=100)}
        assert left == unresolved
        assert seeded.store.audit_log()[0]["outcome"] == (
            f"deleted {len(resolved)} resolved record(s) older than 0s"
        )

    def test_a_huge_limit_is_one_line_and_exit_2(self, invoke: Invoke, seeded: Seeded) -> None:
        """``--limit 10**30`` is refused on one line with exit 2, not a traceback."""
        result = invoke("dlq", "--dlq", seeded.url, "list", "--limit", str(10**30))
        assert result.exit_code == 2
        assert "--limit must be from 1 to 100000" in result.output
        assert "Traceback" not in result.output

    def test_a_memory_store_is_refused_with_exit_2(self, invoke: Invoke) -> None:
        """``--dlq memory://x`` cannot be read from another process: exit 2, not "no records"."""
        result = invoke("dlq", "--dlq", "memory://x", "list")
        assert result.exit_code == 2
        assert "cannot be read from another one" in result.output

    def test_purge_by_id(self, invoke: Invoke, seeded: Seeded) -> None:
        """--id deletes exactly that record and audits it under its id."""
        result = invoke(
            "dlq",
            "--dlq",
            seeded.url,
            "purge",
            "--id",
            seeded.chart.id,
            "--yes",
            "--reason",
            "handled",
        )
        assert result.exit_code == 0
        assert "purged 1 dead letter(s)" in result.stdout
        assert seeded.store.get(seeded.chart.id) is None
        assert [e["action"] for e in seeded.store.audit_log(seeded.chart.id)] == ["purge"]

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--older-than", "30d", "--reason", "r"], "without --yes"),
            (["--older-than", "30d", "--yes"], "needs --reason"),
            (["--older-than", "30d", "--yes", "--reason", "  "], "needs --reason"),
            (["--older-than", "thirty days", "--yes", "--reason", "r"], "invalid --older-than"),
            (["--older-than", "30", "--yes", "--reason", "r"], "invalid --older-than"),
            (["--older-than", "-1d", "--yes", "--reason", "r"], "invalid --older-than"),
            (["--yes", "--reason", "r"], "exactly one of"),
            (["--older-than", "1d", "--id", "x", "--yes", "--reason", "r"], "exactly one of"),
            (["--id", "no-such-id", "--yes", "--reason", "r"], "no dead letter"),
        ],
    )
    def test_refused_purges_exit_2_and_delete_nothing(
        self, invoke: Invoke, seeded: Seeded, args: list[str], message: str
    ) -> None:
        """A purge without its guard rails, or with a bad age or id, changes nothing."""
        result = invoke("dlq", "--dlq", seeded.url, "purge", *args)
        assert result.exit_code == 2
        assert message in one_error_line(result)
        assert len(seeded.store.all()) == 5
        assert seeded.store.audit_log() == []


class TestResolve:
    """dlq resolve."""

    def test_resolves_and_audits(self, invoke: Invoke, seeded: Seeded) -> None:
        """resolve marks the record resolved and writes who and why."""
        result = invoke(
            "dlq",
            "--dlq",
            seeded.url,
            "resolve",
            seeded.chart.id,
            "--yes",
            "--reason",
            "refunded by hand",
            "--actor",
            "ana",
        )
        assert result.exit_code == 0
        record = seeded.store.get(seeded.chart.id)
        assert record is not None
        assert record.resolved_at is not None
        [entry] = seeded.store.audit_log(seeded.chart.id)
        assert (entry["action"], entry["actor"], entry["reason"], entry["outcome"]) == (
            "resolve",
            "ana",
            "refunded by hand",
            "resolved",
        )

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--reason", "r"], "without --yes"),
            (["--yes"], "needs --reason"),
        ],
    )
    def test_guard_rails(
        self, invoke: Invoke, seeded: Seeded, args: list[str], message: str
    ) -> None:
        """resolve without --yes or --reason exits 2 and leaves the record open."""
        result = invoke("dlq", "--dlq", seeded.url, "resolve", seeded.chart.id, *args)
        assert result.exit_code == 2
        assert message in one_error_line(result)
        assert seeded.store.get(seeded.chart.id).resolved_at is None  # type: ignore[union-attr]

    def test_an_unknown_id_exits_2(self, invoke: Invoke, seeded: Seeded) -> None:
        """Resolving a record that does not exist is refused."""
        result = invoke("dlq", "--dlq", seeded.url, "resolve", "nope", "--yes", "--reason", "r")
        assert result.exit_code == 2
        assert seeded.store.audit_log() == []


@pytest.mark.service
def test_list_and_show_on_postgres(invoke: Invoke, pg_schema_url: str) -> None:
    """The same commands work on a PostgreSQL store."""
    from tests.contract_dead_letters import make_record
    from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore

    record = make_record()
    SQLAlchemyDeadLetterStore(pg_schema_url).put(record)
    listed = json.loads(invoke("dlq", "--dlq", pg_schema_url, "list", "--json").stdout)
    assert [r["id"] for r in listed["dead_letters"]] == [record.id]
    shown = invoke("dlq", "--dlq", pg_schema_url, "show", record.id, "--json")
    assert json.loads(shown.stdout)["task_name"] == "shop.charge"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("12h", 43_200),
        ("30d", 2_592_000),
        ("2w", 1_209_600),
        ("1.5h", 5_400),
        (" 7d ", 604_800),
        ("0s", 0),
    ],
)
def test_parse_age(text: str, seconds: float) -> None:
    """Ages are a number and a unit (s, m, h, d, w)."""
    assert parse_age(text) == seconds


@given(st.integers(0, 10**6), st.sampled_from([("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)]))
def test_parse_age_is_number_times_unit(number: int, unit: tuple[str, int]) -> None:
    """For any whole number n and unit u, parse_age("<n><u>") is n times u's seconds."""
    assert parse_age(f"{number}{unit[0]}") == number * unit[1]


@pytest.mark.parametrize("text", ["", "d", "30", "30 days", "1y", "-5s", "1e3s", "nan"])
def test_parse_age_refuses_bad_text(text: str) -> None:
    """Anything but a plain number with a known unit is refused."""
    with pytest.raises(CliError, match="invalid --older-than"):
        parse_age(text)
