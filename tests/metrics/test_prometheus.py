"""Facts become the right ``xsm_*`` counters, histograms and gauges (private registry)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from xsm_celery import hooks
from xsm_celery.hooks import FactKind
from xsm_celery.metrics.labels import MAX_SERIES, OTHER
from xsm_celery.metrics.prometheus import PrometheusMetrics


@pytest.fixture
def metrics() -> Iterator[tuple[PrometheusMetrics, CollectorRegistry]]:
    """Metrics in a registry of their own, subscribed for the test only."""
    registry = CollectorRegistry()
    found = PrometheusMetrics(registry)
    stop = hooks.subscribe(found.handle)
    try:
        yield found, registry
    finally:
        stop()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """One sample's value, or None when it does not exist."""
    return registry.get_sample_value(name, labels)


def test_attempts_retries_and_give_ups_are_counted(
    metrics: tuple[PrometheusMetrics, CollectorRegistry],
) -> None:
    """Attempt outcomes, retries by exception type and their delays, and give-ups."""
    _, reg = metrics
    for outcome in ("retry", "retry", "succeeded"):
        hooks.emit(
            FactKind.ATTEMPT_FINISHED,
            task="t.pay",
            attempt=1,
            outcome=outcome,
            exception=None,
            duration_s=0.02,
        )
    hooks.emit(FactKind.RETRY_SCHEDULED, task="t.pay", exception="ConnectionError", delay_s=0.5)
    hooks.emit(FactKind.RETRY_SCHEDULED, task="t.pay", exception="ConnectionError", delay_s=2.0)
    hooks.emit(FactKind.GAVE_UP, task="t.pay", exception="ValueError")
    assert value(reg, "xsm_task_attempts_total", task="t.pay", outcome="retry") == 2
    assert value(reg, "xsm_task_attempts_total", task="t.pay", outcome="succeeded") == 1
    assert value(reg, "xsm_task_attempt_duration_seconds_count", task="t.pay") == 3
    assert value(reg, "xsm_task_retries_total", task="t.pay", exception="ConnectionError") == 2
    assert value(reg, "xsm_task_retry_delay_seconds_sum", task="t.pay") == 2.5
    assert value(reg, "xsm_task_gave_up_total", task="t.pay", exception="ValueError") == 1


def test_dead_letters_timers_relay_and_dispatch(
    metrics: tuple[PrometheusMetrics, CollectorRegistry],
) -> None:
    """Dead letters by reason, timer lag, relayed rows and dispatcher outcomes."""
    _, reg = metrics
    hooks.emit(FactKind.DEAD_LETTER_WRITTEN, source="task", reason="non_retryable", stored=True)
    hooks.emit(FactKind.DEAD_LETTER_WRITTEN, source="task", reason="non_retryable", stored=False)
    hooks.emit(FactKind.DEAD_LETTER_REPLAYED, source="task")
    hooks.emit(FactKind.TIMER_FIRED, purpose="retry", lag_s=3.0)
    hooks.emit(FactKind.OUTBOX_RELAYED, topic="orders", rows=7, traceparents=())
    hooks.emit(FactKind.DISPATCH_OUTCOME, topic="orders", outcome="duplicate", duration_s=0.001)
    assert value(reg, "xsm_dead_letters_total", source="task", reason="non_retryable") == 2
    assert value(reg, "xsm_dead_letter_store_failures_total", source="task") == 1
    assert value(reg, "xsm_dead_letter_replays_total", source="task") == 1
    assert value(reg, "xsm_timers_fired_total", purpose="retry") == 1
    assert value(reg, "xsm_timer_lag_seconds_sum", purpose="retry") == 3.0
    assert value(reg, "xsm_outbox_relayed_rows_total", topic="orders") == 7
    assert value(reg, "xsm_dispatch_outcomes_total", topic="orders", outcome="duplicate") == 1


def test_breaker_state_and_limits(metrics: tuple[PrometheusMetrics, CollectorRegistry]) -> None:
    """A breaker's transitions and current state, a limit's admissions and deferrals."""
    _, reg = metrics
    hooks.emit(
        FactKind.BREAKER_TRANSITION,
        breaker="psp",
        from_state="closed",
        to_state="open",
        scope="process",
    )
    assert value(reg, "xsm_process_breaker_state", breaker="psp") == 2
    changed = value(reg, "xsm_process_breaker_changed_at_seconds", breaker="psp")
    assert changed is not None
    assert abs(changed - time.time()) < 5
    hooks.emit(FactKind.BREAKER_TRANSITION, name="psp", to_state="half_open", scope="process")
    assert value(reg, "xsm_process_breaker_state", breaker="psp") == 1
    assert (
        value(reg, "xsm_breaker_transitions_total", breaker="psp", scope="process", state="open")
        == 1
    )
    # A fleet breaker's state is Redis' (read on scrape), never what this process last saw.
    hooks.emit(FactKind.BREAKER_TRANSITION, breaker="pay", to_state="open", scope="fleet")
    assert value(reg, "xsm_breaker_transitions_total", breaker="pay", scope="fleet", state="open")
    assert value(reg, "xsm_process_breaker_state", breaker="pay") is None
    assert "xsm_breaker_state" not in generate_latest(reg).decode()
    hooks.emit(FactKind.LIMIT_ADMITTED, limit="psp-rate")
    hooks.emit(FactKind.LIMIT_DEFERRED, limiter="psp-rate")
    assert value(reg, "xsm_limit_admissions_total", limit="psp-rate") == 1
    assert value(reg, "xsm_limit_deferrals_total", limit="psp-rate") == 1
    assert value(reg, "xsm_facts_total", kind="limit_deferred") == 1


def test_a_flood_of_names_is_folded_into_other(
    metrics: tuple[PrometheusMetrics, CollectorRegistry],
) -> None:
    """Past MAX_SERIES distinct topics, new ones are counted under 'other'."""
    _, reg = metrics
    for n in range(MAX_SERIES + 50):
        hooks.emit(FactKind.OUTBOX_RELAYED, topic=f"t{n}", rows=1, traceparents=())
    text = generate_latest(reg).decode()
    assert text.count("xsm_outbox_relayed_rows_total{") == MAX_SERIES + 1
    assert value(reg, "xsm_outbox_relayed_rows_total", topic=OTHER) == 50


def test_workflow_labels_name_what_happened(
    metrics: tuple[PrometheusMetrics, CollectorRegistry],
) -> None:
    """Step errors carry the exception and the step's fate; transitions the state entered."""
    _, reg = metrics
    hooks.emit(
        FactKind.WORKFLOW_STEP_FAILED, workflow="orders", outcome="retry", error="TimeoutError"
    )
    hooks.emit(
        FactKind.WORKFLOW_STEP_FAILED,
        workflow="orders",
        outcome="dead_letter",
        exception="KeyError",
    )
    hooks.emit(
        FactKind.WORKFLOW_TRANSITION,
        workflow="orders",
        event="PAY",
        from_state="new",
        to_state="paying",
    )
    hooks.emit(FactKind.WORKFLOW_TRANSITION, workflow="orders", event="PING", to_state="")
    errors = "xsm_workflow_step_errors_total"
    assert value(reg, errors, workflow="orders", exception="TimeoutError", outcome="retry") == 1
    assert value(reg, errors, workflow="orders", exception="KeyError", outcome="dead_letter") == 1
    assert value(reg, "xsm_workflow_transitions_total", workflow="orders", state="paying") == 1
    text = generate_latest(reg).decode()
    assert 'state=""' not in text
    assert 'exception=""' not in text


def test_stale_timers_are_not_stale_completions(
    metrics: tuple[PrometheusMetrics, CollectorRegistry],
) -> None:
    """A late timer message and a late completion are counted apart; purposes are kept."""
    _, reg = metrics
    hooks.emit(FactKind.STALE_COMPLETION, workflow="saga", message_kind="timer")
    hooks.emit(FactKind.STALE_COMPLETION, workflow="saga", message_kind="done")
    hooks.emit(FactKind.STALE_COMPLETION, workflow="saga", message_kind="error")
    hooks.emit(FactKind.TIMER_FIRED, workflow="saga", purpose="workflow", lag_s=0.1)
    hooks.emit(FactKind.TIMER_SCHEDULED, workflow="saga")
    assert value(reg, "xsm_workflow_stale_timers_total", workflow="saga") == 1
    assert value(reg, "xsm_workflow_stale_completions_total", workflow="saga") == 2
    assert value(reg, "xsm_timers_fired_total", purpose="workflow") == 1
    assert value(reg, "xsm_timers_scheduled_total", purpose="unknown") == 1
    assert value(reg, "xsm_timers_fired_total", purpose="machine") is None
