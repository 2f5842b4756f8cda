"""An in-process Celery app and solo worker for the observability tests (memory broker).

The worker runs in a thread of the test process (``celery.contrib.testing``), so the fact
subscribers the tests install see every fact its tasks emit.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.exceptions import Ignore

from xsm_celery.celery import MemoryAttemptMarkers, Xsm
from xsm_celery.patterns import RetryPolicy
from xsm_celery.persistence.timers import MemoryTimerStore

CALLS: defaultdict[str, int] = defaultdict(int)
#: The value no label, log line, event or span may ever show.
SECRET = "note-7f3a9c-4111111111111111"


def build_app() -> tuple[Celery, MemoryTimerStore]:
    """An app with four chart tasks: flaky, doomed, slow (a durable-timer retry), ignored."""
    queue = f"xsm-obs-{uuid.uuid4().hex[:8]}"
    timers = MemoryTimerStore()
    app = Celery(f"xsm_obs_{queue}")
    app.conf.update(
        broker_url="memory://",
        broker_transport_options={"polling_interval": 0.01},
        task_default_queue=queue,
        result_backend="cache+memory://",
        xsm_dead_letter_store=f"memory://{queue}",
        xsm_timer_store=timers,
        xsm_timer_countdown_max_s=0.5,
        xsm_attempt_markers=MemoryAttemptMarkers(),
    )
    xsm = Xsm(app)

    @xsm.task(name="obs.flaky", retry_policy=RetryPolicy(base_ms=5, jitter="none"))
    def flaky(tag: str, failures: int, note: str = "") -> str:
        CALLS[tag] += 1
        if CALLS[tag] <= failures:
            raise ConnectionError(f"upstream refused {note}")
        return "ok"

    @xsm.task(name="obs.doomed", give_up_on=(ValueError,))
    def doomed(note: str) -> None:
        raise ValueError(f"refused {note}")

    @xsm.task(name="obs.slow", retry_policy=RetryPolicy(base_ms=600, jitter="none"))
    def slow(tag: str) -> str:
        CALLS[tag] += 1
        if CALLS[tag] == 1:
            raise ConnectionError("try later")
        return "late"

    @xsm.task(name="obs.ignored")
    def ignored() -> None:
        raise Ignore()

    return app, timers


@contextmanager
def running(app: Celery) -> Iterator[Any]:
    """A solo worker thread consuming ``app``'s queue."""
    app.loader.import_task_module("celery.contrib.testing.tasks")
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10) as worker:
        yield worker
