"""The Celery signals of resilience events: sent from the fact stream, lazily installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests.celery.workerapp import opened_key
from tests.celery.workers import APP, Cluster
from xsm_celery import hooks
from xsm_celery.celery.signals import circuit_closed, circuit_opened, retry_exhausted
from xsm_celery.engine import SimulatedClock
from xsm_celery.errors import RetryExhaustedError
from xsm_celery.ids import new_id
from xsm_celery.patterns import CircuitBreaker, CircuitOpenedEvent, RetryPolicy, call_with_retry


def fail() -> None:
    """A call that always fails."""
    raise ConnectionError("down")


def test_a_tripped_breaker_sends_circuit_opened_and_closed() -> None:
    """Receivers get ``sender`` = the breaker's name and the event record."""
    received: list[tuple[str, Any]] = []

    def on_opened(sender: str, event: Any, **kwargs: Any) -> None:
        received.append(("opened", sender, event))

    def on_closed(sender: str, event: Any, **kwargs: Any) -> None:
        received.append(("closed", sender, event))

    circuit_opened.connect(on_opened, weak=False)
    circuit_closed.connect(on_closed, weak=False)
    try:
        breaker = CircuitBreaker(failure_threshold=1, name="payments", clock=SimulatedClock())
        with pytest.raises(ConnectionError):
            breaker.call(fail)
        breaker.reset()
    finally:
        circuit_opened.disconnect(on_opened)
        circuit_closed.disconnect(on_closed)
    assert [(kind, sender) for kind, sender, _ in received] == [
        ("opened", "payments"),
        ("closed", "payments"),
    ]
    assert isinstance(received[0][2], CircuitOpenedEvent)


def test_retry_exhausted_is_a_signal() -> None:
    """An in-process retry that gives up sends ``retry_exhausted`` named after the call."""
    received: list[Any] = []

    def on_exhausted(sender: str, event: Any, **kwargs: Any) -> None:
        received.append((sender, event.attempts))

    retry_exhausted.connect(on_exhausted, weak=False)
    try:
        with pytest.raises(RetryExhaustedError):
            call_with_retry(RetryPolicy(max_attempts=2, base_ms=0), fail)
    finally:
        retry_exhausted.disconnect(on_exhausted)
    assert received == [("fail", 2)]


def test_a_chart_task_giving_up_sends_retry_exhausted() -> None:
    """A ``GAVE_UP`` fact shaped as the task path emits it sends the signal with its attempts."""
    received: list[Any] = []

    def on_exhausted(sender: str, event: Any, **kwargs: Any) -> None:
        received.append((sender, event.call, event.attempts, event.reason))

    retry_exhausted.connect(on_exhausted, weak=False)
    try:
        hooks.emit(
            hooks.FactKind.GAVE_UP,
            task="shop.charge",
            task_id="t-1",
            exception="ConnectionError",
            attempt=3,
        )
    finally:
        retry_exhausted.disconnect(on_exhausted)
    assert received == [("shop.charge", "shop.charge", 3, "gave_up")]


def test_a_failing_receiver_does_not_break_the_breaker(caplog: pytest.LogCaptureFixture) -> None:
    """A receiver that raises is logged; the breaker still opens and the call's error stands."""

    def broken(sender: str, **kwargs: Any) -> None:
        raise RuntimeError("pager down")

    circuit_opened.connect(broken, weak=False)
    try:
        breaker = CircuitBreaker(failure_threshold=1, clock=SimulatedClock())
        with pytest.raises(ConnectionError):
            breaker.call(fail)
    finally:
        circuit_opened.disconnect(broken)
    assert breaker.state == "open"
    assert "pager down" in caplog.text


def test_the_bridge_subscribes_only_when_a_receiver_connects() -> None:
    """Importing the signals adds no hooks subscriber; the first ``connect`` adds one."""
    code = textwrap.dedent(
        """
        from xsm_celery import hooks
        from xsm_celery.celery import signals
        assert hooks.subscribers() == (), hooks.subscribers()
        signals.circuit_opened.connect(lambda sender, **kw: None, weak=False)
        signals.retry_exhausted.connect(lambda sender, **kw: None, weak=False)
        assert len(hooks.subscribers()) == 1, hooks.subscribers()
        print("OK")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.stdout.strip() == "OK", result.stderr


@pytest.mark.slow
@pytest.mark.service
@pytest.mark.timeout(240)
def test_a_worker_process_sends_circuit_opened(cluster: Cluster, results_redis: Any) -> None:
    """In a real prefork worker, a breaker tripping inside a task reaches a connected receiver."""
    tag = new_id()
    producer = cluster.producer()
    outcomes = [producer.send_task(f"{APP}.guarded", args=[tag]).get(timeout=90) for _ in range(3)]
    assert outcomes == ["failed", "failed", "refused"]
    recorded = [v.decode() for v in results_redis.lrange(opened_key(tag), 0, -1)]
    assert recorded == [f"upstream-{tag}|failure|CircuitOpenedEvent"]
