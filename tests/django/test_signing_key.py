"""In a Django project the chart headers are signed with a key derived from SECRET_KEY."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
from pathlib import Path

from celery import Celery
from django.conf import settings
from django.test import override_settings

from xsm_celery.celery import ChartTask
from xsm_celery.celery.task.chart_task import warn_if_unsigned
from xsm_celery.celery.task.header import (
    DJANGO_KEY_PURPOSE,
    HEADER,
    SIGNATURE_HEADER,
    TASK_HEADER,
    signing_key,
)

ROOT = Path(__file__).resolve().parents[2]


def _derived(secret: str) -> bytes:
    """The documented derivation: HMAC-SHA256 keyed by SECRET_KEY over the fixed purpose."""
    return hmac.new(secret.encode("utf-8"), DJANGO_KEY_PURPOSE, hashlib.sha256).digest()


def _noop() -> None:
    return None


def test_the_key_derives_from_secret_key_when_no_setting_is_set() -> None:
    """No xsm_signing_key: 32 bytes derived from SECRET_KEY, never the secret itself."""
    key = signing_key({})
    assert key == _derived(settings.SECRET_KEY)
    assert key is not None
    assert len(key) == 32
    assert settings.SECRET_KEY.encode() not in key


def test_xsm_signing_key_wins_over_secret_key() -> None:
    """An explicit key is used as it is."""
    assert signing_key({"xsm_signing_key": "x" * 32}) == b"x" * 32


def test_another_secret_gives_another_key_and_an_empty_one_none() -> None:
    """The key follows SECRET_KEY; an empty SECRET_KEY is no secret (headers go unsigned)."""
    with override_settings(SECRET_KEY="another-secret-of-this-project"):
        assert signing_key({}) == _derived("another-secret-of-this-project")
    with override_settings(SECRET_KEY=""):
        assert signing_key({}) is None


def test_a_chart_task_in_a_django_project_signs_and_its_worker_stays_quiet() -> None:
    """A task bound here writes signed headers with the derived key; no unsigned warning."""
    app = Celery("django-signing", set_as_current=False)
    app.conf.xsm_dead_letter_store = "memory://django-signing"
    task = app.task(base=ChartTask, name="django_signing.noop", shared=False)(_noop)
    codec = type(app.tasks[task.name])._xsm_bound.codec
    assert codec.key == _derived(settings.SECRET_KEY)
    headers = codec.encode('{"status": "running"}', "task-1")
    assert set(headers) == {HEADER, TASK_HEADER, SIGNATURE_HEADER}
    assert warn_if_unsigned(app) is False


def test_a_settings_module_in_the_environment_is_enough() -> None:
    """DJANGO_SETTINGS_MODULE alone (as a worker started by Celery's Django fix-up) signs."""
    code = (
        "import sys\n"
        "from xsm_celery.celery.task.header import signing_key\n"
        "sys.stdout.write(signing_key({}).hex())\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.django.project.settings",
        "PYTHONPATH": str(ROOT),
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout == _derived("xsm-celery-tests-only").hex()
