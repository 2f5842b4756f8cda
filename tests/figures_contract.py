"""The read methods behind the status figures, checked the same way on every store."""

from __future__ import annotations

from typing import Any

from tests.contract_dead_letters import make_record
from xsm_celery.eda import Envelope

__all__ = ["FakeWall", "check_dead_letters_by_reason", "check_oldest_pending", "check_timers"]

NOW = 1_700_000_000.0


class FakeWall:
    """An epoch clock the test moves by hand."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def check_dead_letters_by_reason(store: Any) -> None:
    """``count_by_reason(since)`` counts records taken at or after ``since``, per reason."""
    store.put(make_record(reason="task_exhausted", taken_at=NOW - 10, task_id="a"))
    store.put(make_record(reason="task_exhausted", taken_at=NOW - 7200, task_id="b"))
    store.put(make_record(reason="non_retryable", taken_at=NOW - 3600, task_id="c"))
    assert store.count_by_reason(NOW - 3600) == {"task_exhausted": 1, "non_retryable": 1}
    assert store.count_by_reason(NOW - 86_400) == {"task_exhausted": 2, "non_retryable": 1}
    assert store.count_by_reason(NOW + 1) == {}


def check_oldest_pending(store: Any, wall: FakeWall) -> None:
    """``oldest_pending_at`` is the creation time of the oldest unsent row, None when none."""
    assert store.oldest_pending_at() is None
    wall.now = NOW - 50
    first = store.add("orders", Envelope.new(type="order.paid", subject="o-1"))
    wall.now = NOW - 20
    second = store.add("orders", Envelope.new(type="order.paid", subject="o-2"))
    assert store.oldest_pending_at() == NOW - 50
    store.mark_sent([first])
    assert store.oldest_pending_at() == NOW - 20
    store.mark_sent([second])
    assert store.oldest_pending_at() is None


def check_timers(store: Any) -> None:
    """``count`` and ``earliest_due_at`` describe every stored timer, due or not."""
    assert store.count() == 0
    assert store.earliest_due_at() is None
    store.schedule("job-1", NOW + 300, {})
    early = store.schedule("job-2", NOW - 40, {})
    assert store.count() == 2
    assert store.earliest_due_at() == NOW - 40
    store.delete(early)
    assert store.earliest_due_at() == NOW + 300
