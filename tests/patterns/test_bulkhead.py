"""``Bulkhead``: a concurrency cap, a bounded FIFO line, and rejection past it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsm_celery.errors import BulkheadRejectedError, PolicyError
from xsm_celery.hooks import subscribe
from xsm_celery.patterns import Bulkhead, BulkheadConfig, bulkhead


class Gauge:
    """Counts calls inside a body and remembers the most seen at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


@settings(max_examples=15, deadline=None)
@given(
    limit=st.integers(1, 4),
    queue=st.integers(0, 6),
    threads=st.integers(2, 10),
    hold=st.floats(0.0, 0.004),
)
def test_never_more_than_max_concurrent_run(
    limit: int, queue: int, threads: int, hold: float
) -> None:
    """Real threads racing through a bulkhead never run more than ``max_concurrent`` bodies."""
    guard = Bulkhead(BulkheadConfig(max_concurrent=limit, queue_size=queue))
    gauge = Gauge()
    outcomes: list[str] = []
    barrier = threading.Barrier(threads)

    def body() -> None:
        with gauge:
            time.sleep(hold)

    def worker() -> None:
        barrier.wait(timeout=5)
        try:
            guard.call(body)
            outcomes.append("ran")
        except BulkheadRejectedError:
            outcomes.append("rejected")

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=10)
    assert gauge.peak <= limit
    assert outcomes.count("ran") >= min(threads, limit)
    stats = guard.get_stats()
    assert (stats.active, stats.queued) == (0, 0)
    assert stats.admitted + stats.rejected == threads
    assert stats.peak_active <= limit


def test_a_full_line_rejects_at_once() -> None:
    """With one slot taken and one waiter queued, the next caller is rejected immediately."""
    guard = Bulkhead(BulkheadConfig(max_concurrent=1, queue_size=1), name="db")
    guard.acquire()
    waiter = threading.Thread(target=lambda: (guard.acquire(), guard.release()))
    waiter.start()
    deadline = time.monotonic() + 2
    while guard.get_stats().queued == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    with pytest.raises(BulkheadRejectedError) as info:
        guard.acquire(timeout=5)
    assert isinstance(info.value, PolicyError)
    assert (info.value.name, info.value.max_concurrent, info.value.queue_size) == ("db", 1, 1)
    assert "raise max_concurrent" in str(info.value)
    guard.release()
    waiter.join(timeout=2)
    assert guard.get_stats().admitted == 2


def test_a_queued_call_times_out_into_a_rejection() -> None:
    """A waiter whose ``max_wait_s`` passes is rejected and leaves the line."""
    guard = Bulkhead(BulkheadConfig(max_concurrent=1, queue_size=5, max_wait_s=0.05))
    guard.acquire()
    started = time.monotonic()
    with pytest.raises(BulkheadRejectedError):
        guard.acquire()
    assert 0.04 <= time.monotonic() - started < 1
    assert guard.get_stats().queued == 0


def test_the_line_is_first_in_first_out() -> None:
    """Released slots go to waiters in the order they arrived."""
    guard = Bulkhead(BulkheadConfig(max_concurrent=1, queue_size=5))
    guard.acquire()
    order: list[int] = []

    def worker(index: int) -> None:
        with guard:
            order.append(index)

    pool = []
    for index in range(4):
        thread = threading.Thread(target=worker, args=(index,))
        thread.start()
        pool.append(thread)
        deadline = time.monotonic() + 2
        while guard.get_stats().queued < index + 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    guard.release()
    for thread in pool:
        thread.join(timeout=2)
    assert order == [0, 1, 2, 3]


def test_asyncio_tasks_are_capped_and_queued() -> None:
    """Ten tasks through ``async with`` on two slots and a line of eight all run, two at a time."""

    async def main() -> tuple[int, list[int]]:
        guard = Bulkhead(BulkheadConfig(max_concurrent=2, queue_size=8))
        gauge = Gauge()

        async def body(i: int) -> int:
            async with guard:
                with gauge:
                    await asyncio.sleep(0.01)
            return i

        results = await asyncio.gather(*(body(i) for i in range(10)))
        return gauge.peak, results

    peak, results = asyncio.run(main())
    assert peak == 2
    assert results == list(range(10))


def test_a_cancelled_async_waiter_leaves_no_slot_behind() -> None:
    """Cancelling a queued task removes it from the line and keeps the count right."""

    async def main() -> Bulkhead:
        guard = Bulkhead(BulkheadConfig(max_concurrent=1, queue_size=3))
        await guard.aacquire()
        task = asyncio.create_task(guard.aacquire())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        guard.release()
        await guard.aacquire()
        return guard

    stats = asyncio.run(main()).get_stats()
    assert (stats.active, stats.queued) == (1, 0)


def test_threads_and_tasks_share_one_bulkhead() -> None:
    """A thread releasing the slot wakes an asyncio task waiting for it."""
    guard = Bulkhead(BulkheadConfig(max_concurrent=1, queue_size=1))
    guard.acquire()
    threading.Timer(0.05, guard.release).start()

    async def main() -> float:
        started = time.monotonic()
        result = await guard.acall(lambda: 7)
        assert result == 7
        return time.monotonic() - started

    assert asyncio.run(main()) >= 0.04


def test_the_decorator_guards_sync_and_async_functions() -> None:
    """``@bulkhead`` gives each function its own bulkhead named after it."""

    @bulkhead(max_concurrent=1)
    def sync_work() -> str:
        with pytest.raises(BulkheadRejectedError):
            sync_work()
        return "ok"

    @bulkhead(max_concurrent=3, name="aio")
    async def async_work() -> str:
        return "done"

    assert sync_work() == "ok"
    assert asyncio.run(async_work()) == "done"
    assert async_work.bulkhead.name == "aio"  # type: ignore[attr-defined]
    assert sync_work.bulkhead.get_stats().rejected == 1  # type: ignore[attr-defined]


def test_an_unpaired_release_is_an_error() -> None:
    """Releasing a slot nobody holds is a programming error with a clear message."""
    with pytest.raises(RuntimeError, match="released more often"):
        Bulkhead().release()


@pytest.mark.parametrize(
    "options", [{"max_concurrent": 0}, {"queue_size": -1}, {"max_wait_s": -1.0}]
)
def test_bad_limits_are_refused(options: dict[str, float]) -> None:
    """Out-of-range limits raise ``ValueError`` naming the field."""
    with pytest.raises(ValueError, match=next(iter(options))):
        BulkheadConfig(**options)  # type: ignore[arg-type]


def test_a_fact_subscriber_may_read_the_bulkhead() -> None:
    """The rejection fact is emitted outside the lock, so a subscriber reading stats cannot deadlock."""
    guard = Bulkhead(BulkheadConfig(max_concurrent=1), name="db")
    seen = []
    errors: list[BaseException] = []

    def refused() -> None:
        try:
            guard.acquire()
        except BulkheadRejectedError as exc:
            errors.append(exc)

    stop = subscribe(lambda fact: seen.append(guard.get_stats().rejected))
    try:
        guard.acquire()
        worker = threading.Thread(target=refused)
        worker.start()
        worker.join(timeout=5)
        assert not worker.is_alive()
    finally:
        stop()
        guard.release()
    assert seen == [1]
    assert len(errors) == 1
