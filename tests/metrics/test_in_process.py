"""Chart tasks on an in-process worker: spans across retries and timers, and no leaked argument.

The worker is a thread of the test process, so the exporters subscribed here see the facts
of real Celery runs: messages, retries with countdowns, a durable timer fired by
``fire_due_timers`` and a dead letter.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from tests.celery.workers import wait_for
from tests.metrics.inproc import SECRET, build_app, running
from xsm_celery import hooks
from xsm_celery.celery import fire_due_timers
from xsm_celery.metrics.events import EVENT_TYPES, event_fields
from xsm_celery.metrics.logs import FactLogger
from xsm_celery.metrics.prometheus import PrometheusMetrics
from xsm_celery.metrics.tracing import Tracing
from xsm_celery.persistence.timers import MemoryTimerStore

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def worker_app() -> Iterator[tuple[Celery, MemoryTimerStore]]:
    """The app and its timer store, with a solo worker thread for the whole module."""
    app, timers = build_app()
    with running(app):
        yield app, timers


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans recorded by an SDK provider of the test's own, through ``Tracing``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    stop = hooks.subscribe(Tracing(provider).handle)
    try:
        yield exporter
    finally:
        stop()
        provider.shutdown()


def _task_spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return sorted(
        (s for s in exporter.get_finished_spans() if s.name == f"xsm.task {name}"),
        key=lambda s: s.start_time or 0,
    )


def test_retried_attempts_are_one_trace(
    worker_app: tuple[Celery, MemoryTimerStore], spans: InMemorySpanExporter
) -> None:
    """Three attempts of a task that fails twice: three spans, one trace, each the next's parent."""
    app, _ = worker_app
    result = app.send_task("obs.flaky", args=(uuid.uuid4().hex, 2))
    assert result.get(timeout=30, interval=0.01) == "ok"
    found = wait_for(
        lambda: len(_task_spans(spans, "obs.flaky")) >= 3 and _task_spans(spans, "obs.flaky"),
        10,
        "three attempt spans",
    )
    assert [s.attributes["xsm.attempt"] for s in found] == [1, 2, 3]
    assert [s.attributes["xsm.outcome"] for s in found] == ["retry", "retry", "succeeded"]
    assert len({s.context.trace_id for s in found}) == 1
    assert found[0].parent is None
    assert found[1].parent.span_id == found[0].context.span_id
    assert found[2].parent.span_id == found[1].context.span_id


def test_a_first_run_reports_its_outcome(worker_app: tuple[Celery, MemoryTimerStore]) -> None:
    """A first delivery that succeeds, and one that raises Ignore, each finish with their outcome.

    Both take the direct first run (no chart is started for them), which must still tell the
    facts where the run settled.
    """
    app, _ = worker_app
    seen: list[hooks.Fact] = []
    stop = hooks.subscribe(seen.append, kinds=(hooks.FactKind.ATTEMPT_FINISHED,))
    try:
        assert app.send_task("obs.flaky", args=(uuid.uuid4().hex, 0)).get(timeout=30) == "ok"
        app.send_task("obs.ignored")
        finished = wait_for(lambda: len(seen) >= 2 and seen, 10, "two finished attempts")
    finally:
        stop()
    outcomes = {(f.fields["task"], f.fields["attempt"], f.fields["outcome"]) for f in finished}
    assert outcomes == {("obs.flaky", 1, "succeeded"), ("obs.ignored", 1, "control")}


def test_a_durable_timer_keeps_the_trace(
    worker_app: tuple[Celery, MemoryTimerStore], spans: InMemorySpanExporter
) -> None:
    """A retry that waits in a timer row continues the trace of the attempt that failed."""
    app, timers = worker_app
    result = app.send_task("obs.slow", args=(uuid.uuid4().hex,))
    wait_for(lambda: timers.count() == 1, 10, "the retry's timer row")
    row = timers.due(time.time() + 60, limit=1)[0]
    assert row.payload["headers"]["traceparent"].startswith("00-")
    wait_for(lambda: fire_due_timers(app) == 1, 5, "the timer to come due and fire")
    assert result.get(timeout=30, interval=0.01) == "late"
    found = wait_for(
        lambda: len(_task_spans(spans, "obs.slow")) >= 2 and _task_spans(spans, "obs.slow"),
        10,
        "two attempt spans",
    )
    assert found[0].context.trace_id == found[1].context.trace_id
    assert found[1].parent.span_id == found[0].context.span_id


def test_no_argument_value_reaches_a_label_a_log_line_an_event_or_a_span(
    worker_app: tuple[Celery, MemoryTimerStore],
    spans: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A value passed as an argument (and put in exception messages) never leaves through us."""
    app, _ = worker_app
    registry = CollectorRegistry()
    events: list[dict[str, Any]] = []
    stops = [
        hooks.subscribe(PrometheusMetrics(registry).handle),
        hooks.subscribe(FactLogger().handle),
        hooks.subscribe(
            lambda f: events.append(event_fields(f.fields)) if f.kind in EVENT_TYPES else None
        ),
    ]
    try:
        with caplog.at_level(logging.DEBUG):
            ok = app.send_task("obs.flaky", args=(uuid.uuid4().hex, 1), kwargs={"note": SECRET})
            assert ok.get(timeout=30, interval=0.01) == "ok"
            doomed = app.send_task("obs.doomed", args=(SECRET,))
            with pytest.raises(ValueError, match=SECRET):
                doomed.get(timeout=30, interval=0.01)
            wait_for(
                lambda: any(e.get("reason") == "non_retryable" for e in events),
                10,
                "the dead-letter event",
            )
    finally:
        for stop in stops:
            stop()
    exposition = generate_latest(registry).decode()
    assert 'reason="non_retryable"' in exposition
    assert 'exception="ConnectionError"' in exposition
    assert SECRET not in exposition
    ours = [r for r in caplog.records if r.name.startswith("xsm_celery")]
    assert any(getattr(r, "xsm_event", None) == "dead_letter_written" for r in ours)
    for record in ours:
        assert SECRET not in record.getMessage()
        assert SECRET not in json.dumps(vars(record), default=str)
    assert events
    assert SECRET not in json.dumps(events)
    for span in spans.get_finished_spans():
        text = json.dumps(
            [
                span.name,
                dict(span.attributes or {}),
                [dict(e.attributes or {}) for e in span.events],
            ],
            default=str,
        )
        assert SECRET not in text
