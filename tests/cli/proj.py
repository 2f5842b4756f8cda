"""Minimal Celery projects for the CLI tests: ``--app tests.cli.proj:app``.

``app`` publishes to kombu's in-memory broker, so a replayed task can be read back from
the queue; ``unreachable`` points at a closed port and never retries, so a real replay
through it fails at once.
"""

from __future__ import annotations

import os
import tempfile

from celery import Celery

from xsm_celery.celery import ChartTask
from xsm_celery.patterns import RetryPolicy

#: The dead-letter store the apps are configured with: a file, because the CLI refuses a
#: memory store (another process could not read it); subprocess tests set their own URL.
STORE_URL = os.environ.get(
    "XSM_TEST_DLQ", f"sqlite:///{tempfile.gettempdir()}/xsm-cli-tests-{os.getpid()}.db"
)

#: The name of the task the records in these tests were written by.
TASK_NAME = "cli_tests.charge"

app = Celery("cli_tests", broker="memory://")
app.conf.xsm_dead_letter_store = STORE_URL


@app.task(base=ChartTask, name=TASK_NAME, retry_policy=RetryPolicy(max_attempts=2))
def charge(order_id: int, amount: float) -> str:
    """Never run in these tests: only replayed, i.e. sent."""
    return f"charged {order_id} {amount}"


unreachable = Celery("cli_unreachable", broker="redis://127.0.0.1:1/0")
unreachable.conf.update(
    xsm_dead_letter_store=STORE_URL,
    broker_connection_retry=False,
    broker_connection_max_retries=0,
    task_publish_retry=False,
    broker_connection_timeout=1,
)
