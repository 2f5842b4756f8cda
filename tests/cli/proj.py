"""A minimal Celery project for the CLI tests: ``--app tests.cli.proj:app``."""

from __future__ import annotations

import os

from celery import Celery

#: The dead-letter store the app is configured with; subprocess tests set a file URL.
STORE_URL = os.environ.get("XSM_TEST_DLQ", "memory://cli-tests")

app = Celery("cli_tests", broker=os.environ.get("XSM_TEST_BROKER", "memory://"))
app.conf.xsm_dead_letter_store = STORE_URL
app.conf.task_always_eager = False
