"""CircuitBreaker under real threads and asyncio tasks: one admission rule, exact probes."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import pytest

from xsm_celery.engine import PluginBase, SimulatedClock, WallClock
from xsm_celery.patterns import CircuitBreaker, CircuitOpenError

WAIT = 30.0


def half_open_breaker(max_calls: int) -> CircuitBreaker:
    clock = SimulatedClock()
    breaker = CircuitBreaker(
        failure_threshold=1, cooldown_ms=1_000, half_open_max_calls=max_calls, clock=clock
    )
    with pytest.raises(RuntimeError):
        breaker.call(_fail)
    clock.increment(1_001)
    assert breaker.state == "half_open"
    return breaker


def _fail() -> None:
    raise RuntimeError("down")


def wait_until(predicate: Any, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.001)


@pytest.mark.parametrize(("threads", "probes"), [(32, 1), (128, 2), (512, 7)])
@pytest.mark.parametrize("one_fails", [False, True])
def test_barrier_at_half_open_admits_exactly_n_probes(
    threads: int, probes: int, one_fails: bool
) -> None:
    """Threads released by a barrier at half-open: exactly N targets run, the rest get half_open rejections."""
    breaker = half_open_breaker(probes)
    barrier = threading.Barrier(threads)
    release = threading.Event()
    lock = threading.Lock()
    started: list[int] = []
    rejected: list[str] = []

    def target(n: int) -> None:
        with lock:
            started.append(n)
            first = len(started) == 1
        release.wait(WAIT)
        if one_fails and first:
            raise RuntimeError("probe failed")

    def worker(n: int) -> None:
        barrier.wait()
        try:
            breaker.call(target, n)
        except CircuitOpenError as exc:
            with lock:
                rejected.append(exc.state)
        except RuntimeError:
            pass

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    wait_until(lambda: len(rejected) + len(started) >= threads)
    assert len(started) == probes
    assert rejected == ["half_open"] * (threads - probes)
    release.set()
    for t in pool:
        t.join(WAIT)
    assert breaker.state == ("open" if one_fails else "closed")


def test_five_hundred_acall_tasks_share_the_admission_rule() -> None:
    """500 acall tasks on one loop at half-open with 5 slots: exactly 5 probes run."""
    breaker = half_open_breaker(5)

    async def main() -> tuple[int, list[str]]:
        gate = asyncio.Event()
        ran = 0

        async def probe() -> str:
            nonlocal ran
            ran += 1
            await gate.wait()
            return "ok"

        async def one() -> str:
            try:
                return await breaker.acall(probe)
            except CircuitOpenError as exc:
                return exc.state

        tasks = [asyncio.create_task(one()) for _ in range(500)]
        await asyncio.sleep(0)
        while sum(t.done() for t in tasks) < 495:
            await asyncio.sleep(0.001)
        gate.set()
        results = await asyncio.gather(*tasks)
        return ran, results

    ran, results = asyncio.run(main())
    assert ran == 5
    assert results.count("ok") == 5
    assert results.count("half_open") == 495
    assert breaker.state == "closed"


def test_threads_and_tasks_together_admit_exactly_n() -> None:
    """64 threads and 64 asyncio tasks on one half-open breaker with 3 slots: 3 probes in total."""
    breaker = half_open_breaker(3)
    release = threading.Event()
    lock = threading.Lock()
    started: list[str] = []
    rejected: list[str] = []
    barrier = threading.Barrier(65)

    def sync_probe() -> None:
        with lock:
            started.append("thread")
        release.wait(WAIT)

    async def async_probe() -> None:
        with lock:
            started.append("task")
        while not release.is_set():
            await asyncio.sleep(0.001)

    def thread_worker() -> None:
        barrier.wait()
        try:
            breaker.call(sync_probe)
        except CircuitOpenError as exc:
            with lock:
                rejected.append(exc.state)

    async def task_worker() -> None:
        try:
            await breaker.acall(async_probe)
        except CircuitOpenError as exc:
            with lock:
                rejected.append(exc.state)

    def loop_thread() -> None:
        async def main() -> None:
            barrier.wait()
            await asyncio.gather(*(task_worker() for _ in range(64)))

        asyncio.run(main())

    pool = [threading.Thread(target=thread_worker) for _ in range(64)]
    pool.append(threading.Thread(target=loop_thread))
    for t in pool:
        t.start()
    wait_until(lambda: len(started) + len(rejected) >= 128)
    assert len(started) == 3
    assert rejected == ["half_open"] * 125
    release.set()
    for t in pool:
        t.join(WAIT)
    assert breaker.state == "closed"


def test_state_is_never_stale_from_another_thread() -> None:
    """A thread that never called reads half_open once the wall-clock cooldown has elapsed."""
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=20, clock=WallClock())
    with pytest.raises(RuntimeError):
        breaker.call(_fail)
    time.sleep(0.05)
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.append(breaker.state))
    reader.start()
    reader.join(WAIT)
    assert seen == ["half_open"]


def test_plugin_reading_state_inside_on_transition_does_not_deadlock() -> None:
    """A plugin that reads breaker.state from on_transition re-enters the lock safely."""
    seen: list[str] = []
    holder: dict[str, CircuitBreaker] = {}

    class Reader(PluginBase):
        def on_transition(
            self, interpreter: Any, from_states: Any, to_states: Any, transition: Any
        ) -> None:
            if "breaker" in holder:
                seen.append(holder["breaker"].state)

    clock = SimulatedClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_ms=10, plugins=[Reader()], clock=clock)
    holder["breaker"] = breaker
    done = threading.Event()

    def run() -> None:
        with pytest.raises(RuntimeError):
            breaker.call(_fail)
        breaker.reset()
        done.set()

    worker = threading.Thread(target=run)
    worker.start()
    assert done.wait(WAIT), "deadlock: the breaker never returned"
    worker.join()
    assert seen
    assert breaker.state == "closed"


def test_nested_call_on_the_same_breaker_is_admitted_independently() -> None:
    """A target that calls the same breaker runs its nested call (the target runs outside the lock)."""
    breaker = CircuitBreaker(clock=SimulatedClock())
    assert breaker.call(lambda: breaker.call(lambda: "inner") + "+outer") == "inner+outer"


def test_targets_run_outside_the_lock() -> None:
    """8 threads x 0.2 s calls through one breaker finish together, not one after another."""
    breaker = CircuitBreaker(clock=SimulatedClock())
    started = time.perf_counter()
    pool = [threading.Thread(target=breaker.call, args=(time.sleep, 0.2)) for _ in range(8)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(WAIT)
    assert time.perf_counter() - started < 1.0  # serialised would be 1.6 s


def test_concurrent_failures_trip_once_and_count_once() -> None:
    """32 threads failing together while closed open the circuit exactly once."""
    breaker = CircuitBreaker(failure_threshold=5, cooldown_ms=60_000, clock=SimulatedClock())
    barrier = threading.Barrier(32)

    def worker() -> None:
        barrier.wait()
        for _ in range(10):
            with contextlib.suppress(RuntimeError, CircuitOpenError):
                breaker.call(_fail)

    pool = [threading.Thread(target=worker) for _ in range(32)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(WAIT)
    assert breaker.state == "open"
    assert breaker.opened_count == 1
