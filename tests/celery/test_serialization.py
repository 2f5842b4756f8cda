"""Only JSON is accepted for chart tasks; pickle is refused at registration and worker start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from celery import Celery

from xsm_celery.celery import ChartTask, require_json
from xsm_celery.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def test_json_configuration_passes() -> None:
    """The default Celery configuration (JSON) is accepted."""
    require_json(Celery("ok", set_as_current=False).conf, task_name="t")


def test_a_pickle_serializer_is_refused_with_the_fix() -> None:
    """task_serializer='pickle' is refused with the two settings to change."""
    app = Celery("p", set_as_current=False)
    app.conf.task_serializer = "pickle"
    with pytest.raises(ConfigurationError) as caught:
        require_json(app.conf, task_name="shop.charge")
    message = str(caught.value)
    assert "shop.charge" in message
    assert "task_serializer = 'json'" in message
    assert "accept_content = ['json']" in message


def test_accepting_pickle_is_refused() -> None:
    """accept_content that allows pickle is refused even with a JSON serializer."""
    app = Celery("p", set_as_current=False)
    app.conf.accept_content = ["json", "application/x-python-serialize"]
    with pytest.raises(ConfigurationError, match="application/x-python-serialize"):
        require_json(app.conf, task_name="t")


def test_a_task_level_pickle_serializer_is_refused() -> None:
    """The task's own serializer option overrides the app's and is checked too."""
    with pytest.raises(ConfigurationError, match="'pickle'"):
        require_json(
            Celery("p", set_as_current=False).conf, task_name="t", task_serializer="pickle"
        )


def test_registering_a_chart_task_on_a_pickle_app_fails() -> None:
    """Binding a ChartTask to an app configured for pickle raises at once."""
    app = Celery("p", set_as_current=False)
    app.conf.task_serializer = "pickle"

    @app.task(shared=False, base=ChartTask)
    def charge() -> None: ...

    with pytest.raises(ConfigurationError, match="task_serializer = 'json'"):
        app.finalize(auto=True)


@pytest.mark.timeout(60)
def test_a_worker_with_a_pickle_configuration_refuses_to_start(tmp_path: Path) -> None:
    """``celery worker`` exits at start-up, printing what to set, instead of consuming."""
    (tmp_path / "pickleapp.py").write_text(
        "from celery import Celery\n"
        "from xsm_celery.celery import ChartTask\n"
        "app = Celery('pickleapp', broker='memory://')\n"
        "app.conf.task_serializer = 'pickle'\n"
        "@app.task(shared=False, base=ChartTask)\n"
        "def charge():\n"
        "    return 1\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "pickleapp", "worker", "-P", "solo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode != 0
    assert "app.conf.task_serializer = 'json'" in done.stderr
