"""``celery -A proj xsm status`` in a generated Django project whose stores are ``"django"``.

The project is written to a temporary folder the way ``django-admin startproject`` and the
Celery docs lay one out (``proj/settings.py``, ``proj/celery.py`` setting
``DJANGO_SETTINGS_MODULE``), migrated, seeded through its own stores, and every command runs
in a real process from the project's folder, without ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(sys.executable).parent / "xsm-celery"

SETTINGS = """
SECRET_KEY = "xsm-cli-django-project"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "xsm_celery.django"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {db!r}}}}}
CELERY_BROKER_URL = "memory://"
CELERY_XSM_DEAD_LETTER_STORE = "django"
CELERY_XSM_TIMER_STORE = "django"
CELERY_XSM_OUTBOX_STORE = "django"
"""

CELERY_MODULE = """
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""

SEED = """
import time

import django

django.setup()

from xsm_celery.django.stores import DjangoDeadLetterStore, DjangoTimerStore
from xsm_celery.patterns.dead_letter import DeadLetter

now = time.time()
DjangoDeadLetterStore().put(
    DeadLetter(
        machine_id="shop", state_id="shop.charging", event={}, attempts=3, errors=[],
        snapshot={}, taken_at=now - 60, reason="task_exhausted", task_name="shop.charge",
        task_id="t-1",
    )
)
DjangoTimerStore().schedule("shop.charge:t-2", now - 30, {"task": "shop.charge"})
"""


def _run(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")
    }
    return subprocess.run(
        list(args),
        cwd=project,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated Django project holding one dead letter and one overdue timer."""
    root = tmp_path_factory.mktemp("djproject")
    package = root / "proj"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(SETTINGS.format(db=str(root / "db.sqlite3")))
    (package / "celery.py").write_text(CELERY_MODULE)
    (root / "manage.py").write_text(
        "import os, sys\n"
        'os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")\n'
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n"
    )
    done = _run(root, sys.executable, "manage.py", "migrate", "-v", "0")
    assert done.returncode == 0, done.stderr
    seeded = _run(
        root, sys.executable, "-c", SEED, DJANGO_SETTINGS_MODULE="proj.settings", PYTHONPATH="."
    )
    assert seeded.returncode == 0, seeded.stderr
    return root


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    assert report["errors"] == {}
    return report


def test_celery_xsm_status_reads_the_django_stores(project: Path) -> None:
    """``celery -A proj xsm status`` sets Django up from the app and shows its stores."""
    done = _run(
        project, sys.executable, "-m", "celery", "-A", "proj", "xsm", "status", "--no-workers"
    )
    assert done.returncode == 0, done.stderr
    assert "task_exhausted" in done.stdout
    assert "durable timers" in done.stdout
    report = _report(
        _run(
            project,
            *(sys.executable, "-m", "celery", "-A", "proj"),
            *("xsm", "status", "--no-workers", "--json"),
        )
    )
    assert report["dead_letters"] == {"1h": {"task_exhausted": 1}, "24h": {"task_exhausted": 1}}
    assert report["timers"]["pending"] == 1  # type: ignore[index]
    assert report["outbox"]["pending"] == 0  # type: ignore[index]


def test_the_console_script_with_app_from_the_project_folder(project: Path) -> None:
    """``xsm-celery status --app proj.celery:app`` imports from the current folder."""
    report = _report(
        _run(project, str(SCRIPT), "status", "--app", "proj.celery:app", "--no-workers", "--json")
    )
    assert report["dead_letters"]["24h"] == {"task_exhausted": 1}  # type: ignore[index]


def test_every_store_option_accepts_django(project: Path) -> None:
    """``--dlq``, ``--timers``, ``--outbox`` and ``--instances django`` open the Django tables."""
    args = ("--dlq", "django", "--timers", "django", "--outbox", "django", "--instances", "django")
    report = _report(
        _run(
            project, str(SCRIPT), "status", *args, "--json", DJANGO_SETTINGS_MODULE="proj.settings"
        )
    )
    assert report["timers"]["pending"] == 1  # type: ignore[index]
    assert report["instances"] == []


def test_django_store_without_settings_says_what_to_set(project: Path) -> None:
    """Without DJANGO_SETTINGS_MODULE the refusal is one line naming the command and the fix."""
    done = _run(project, str(SCRIPT), "status", "--timers", "django")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("xsm status: error: cannot set up Django for the --timers")
    assert "DJANGO_SETTINGS_MODULE" in line


def test_replay_store_option_accepts_django(project: Path) -> None:
    """``dlq replay --store django`` opens the Django snapshot store and inbox."""
    probe = (
        "from xsm_celery.cli.dispatcher import open_state_store\n"
        "store, inbox = open_state_store('django')\n"
        "print(type(store).__name__, type(inbox).__name__, store.list_keys())\n"
    )
    done = _run(project, sys.executable, "-c", probe, DJANGO_SETTINGS_MODULE="proj.settings")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["DjangoSnapshotStore", "DjangoInbox", "[]"]
