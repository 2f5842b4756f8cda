"""The installed ``xsm-celery`` script, run as a real process: each exit code, and no extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import proj
from tests.contract_dead_letters import make_record
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "xsm-celery"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the console script with the repository importable (for --app tests.cli.proj)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XSM_DLQ", None)
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A file store holding one replayable task record."""
    url = f"sqlite:///{tmp_path / 'dlq.db'}"
    store = SQLAlchemyDeadLetterStore(url)
    store.put(
        make_record(
            id="0190a1b2-0000-7000-8000-000000000001",
            task_name=proj.TASK_NAME,
            task_args=[1],
            task_kwargs={},
        )
    )
    store.close()
    return url


@pytest.mark.slow
def test_exit_0_with_parseable_json(store_url: str) -> None:
    """``list --json`` exits 0 and prints only JSON on stdout."""
    done = run("dlq", "--dlq", store_url, "list", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["count"] == 1
    assert done.stderr == ""


@pytest.mark.slow
def test_exit_2_for_a_missing_file(tmp_path: Path) -> None:
    """A missing store file exits 2 with one stderr line, an empty stdout and no file made."""
    done = run("dlq", "--dlq", f"sqlite:///{tmp_path / 'typo.db'}", "list", "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "typo.db").exists()


@pytest.mark.slow
def test_exit_1_when_a_real_replay_fails(store_url: str) -> None:
    """A real replay whose broker is down exits 1 and leaves the record unresolved."""
    record_id = "0190a1b2-0000-7000-8000-000000000001"
    done = run(
        "dlq",
        "--dlq",
        store_url,
        "--app",
        "tests.cli.proj:unreachable",
        "replay",
        record_id,
        "--no-dry-run",
        "--yes",
        "--reason",
        "retry after outage",
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().startswith("xsm dlq: error: replay of")
    record = SQLAlchemyDeadLetterStore(store_url).get(record_id)
    assert record is not None
    assert record.resolved_at is None


@pytest.mark.slow
def test_without_click_the_script_says_what_to_install() -> None:
    """With click missing, main() prints the pip command for the cli extra and exits 1."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('click', 'rich'):\n"
        "            raise ImportError(name, name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from xsm_celery.cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "pip install 'xsm-celery[cli]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_sqlalchemy_the_package_names_its_extra() -> None:
    """Importing xsm_celery.sqlalchemy without SQLAlchemy raises MissingExtraError."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'sqlalchemy':\n"
        "            raise ImportError(name, name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from xsm_celery.errors import MissingExtraError\n"
        "try:\n"
        "    import xsm_celery.sqlalchemy\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert 'pip install "xsm-celery[sqlalchemy]"' in done.stdout, done.stderr
