"""The Celery app of the dead-letter kill and replay tests' real worker (``celery -A ...``).

Configured from the environment by ``tests/celery/dead_letter_workers.py``: a Redis broker
and result backend, the queue, the dead-letter store URL (a SQLite file or a private
PostgreSQL schema) and the spool directory. Attempt markers live in the broker's Redis.

The dead-letter store is ``KillingDeadLetterStore``: the real SQL store, except that it
SIGKILLs its own process at a point a test planned for one task (Redis key
``plan_key(task_id)``), once, recording the kill in ``killed_key(task_id)``. So a test can
kill a real prefork child just before or just after the record commits, and the redelivered
message then proceeds normally.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import redis
import sqlalchemy as sa
from celery import Celery

from xsm_celery.celery import Xsm
from xsm_celery.patterns import DeadLetter, RetryPolicy
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore

#: Where the store kills its process: inside the transaction, or once it has committed.
BEFORE_COMMIT = "before-commit"
AFTER_COMMIT = "after-commit"

BROKER = os.environ.get("XSM_TEST_BROKER", "redis://127.0.0.1:6379/13")
DLQ_URL = os.environ.get("XSM_TEST_DLQ", "sqlite:///xsm_test_dead_letter_kill.db")

_redis = redis.Redis.from_url(os.environ.get("XSM_TEST_BACKEND", "redis://127.0.0.1:6379/14"))


def plan_key(task_id: str) -> str:
    """Redis key a test sets to ``BEFORE_COMMIT`` or ``AFTER_COMMIT`` to plan a kill."""
    return f"xsm-test:dl-kill:plan:{task_id}"


def killed_key(task_id: str) -> str:
    """Redis key the store sets to the kill point just before it kills its process."""
    return f"xsm-test:dl-kill:killed:{task_id}"


def calls_key(tag: str) -> str:
    """Redis counter of a task's calls under ``tag``."""
    return f"xsm-test:dl-kill:calls:{tag}"


def down_key(tag: str) -> str:
    """While this Redis key exists, ``flaky`` fails."""
    return f"xsm-test:dl-kill:down:{tag}"


def recorded_key(tag: str) -> str:
    """Redis list of the values ``record`` received."""
    return f"xsm-test:dl-kill:recorded:{tag}"


def _count(tag: str) -> int:
    """One more call under ``tag``; the counter expires with the test's other keys."""
    calls = int(_redis.incr(calls_key(tag)))
    _redis.expire(calls_key(tag), 600)
    return calls


def _kill_if_planned(task_id: str | None, point: str) -> None:
    """SIGKILL this process if a test planned it at ``point`` for ``task_id`` (once)."""
    if task_id is None:
        return
    key = plan_key(task_id)
    if _redis.get(key) != point.encode() or not _redis.delete(key):
        return
    _redis.set(killed_key(task_id), point, ex=600)
    os.kill(os.getpid(), signal.SIGKILL)


class KillingDeadLetterStore(SQLAlchemyDeadLetterStore):
    """The SQL store, killing its process once at a planned point of a task's ``put``."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._writing: str | None = None
        sa.event.listen(self.engine, "commit", self._before_commit)

    def _before_commit(self, conn: Any) -> None:
        # The DELETE and INSERT of put() ran; the transaction is not committed yet.
        _kill_if_planned(self._writing, BEFORE_COMMIT)

    def put(self, record: DeadLetter) -> str:
        """Store the record; die first or after as the test planned for its task."""
        self._writing = record.task_id
        try:
            record_id = super().put(record)
        finally:
            self._writing = None
        _kill_if_planned(record.task_id, AFTER_COMMIT)
        return record_id


class PerProcessStore:
    """Opens the killing store in the process that uses it: a connection must not cross a fork.

    Every other method is the store's own, so the worker and its spool see a real store.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._opened: tuple[int, KillingDeadLetterStore] | None = None

    def _store(self) -> KillingDeadLetterStore:
        if self._opened is None or self._opened[0] != os.getpid():
            self._opened = (os.getpid(), KillingDeadLetterStore(self._url))
        return self._opened[1]

    def put(self, record: DeadLetter) -> str:
        """``KillingDeadLetterStore.put``."""
        return self._store().put(record)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._store(), name)


app = Celery("xsm_dead_letter_kill_tests")
app.conf.update(
    broker_url=BROKER,
    result_backend=os.environ.get("XSM_TEST_BACKEND", "redis://127.0.0.1:6379/14"),
    task_default_queue=os.environ.get("XSM_TEST_QUEUE", "xsm-tests"),
    broker_transport_options={"visibility_timeout": 30},
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    result_expires=600,
    xsm_dead_letter_store=PerProcessStore(DLQ_URL),
    xsm_dead_letter_spool=os.environ.get("XSM_TEST_SPOOL", "xsm_test_dead_letter_kill.spool"),
    xsm_attempt_markers=BROKER,
    xsm_timer_store=os.environ.get("XSM_TEST_TIMERS", "sqlite:///xsm_test_timers.db"),
    xsm_timer_countdown_max_s=2.0,
)
xsm = Xsm(app)

_POLICY = RetryPolicy(max_attempts=2, base_ms=20, jitter="none")


@xsm.task(name="dl_kill.always_fails", shared=False, retry_policy=_POLICY)
def always_fails(tag: str) -> None:
    """Fail on every call, so the second failure gives up and writes the dead letter."""
    raise ConnectionError(f"upstream refused call {_count(tag)}")


@xsm.task(name="dl_kill.flaky", shared=False, retry_policy=_POLICY)
def flaky(tag: str, amount: int) -> dict[str, Any]:
    """Fail while ``down_key(tag)`` exists, else return the doubled amount."""
    _count(tag)
    if _redis.exists(down_key(tag)):
        raise ConnectionError(f"ledger for {tag} is down")
    return {"tag": tag, "doubled": amount * 2}


@app.task(name="dl_kill.record", shared=False)
def record(value: Any, tag: str) -> Any:
    """The next task of a chain: keep the value it received, so the test can read it."""
    _redis.rpush(recorded_key(tag), repr(value))
    _redis.expire(recorded_key(tag), 600)
    return value
