"""Cost of metrics and tracing on a no-op chart task: tasks/s with each on, against off.

One ``celery worker -P solo`` over Redis drains N messages of one no-op ``ChartTask`` with
every exporter ready (``xsm_metrics_port`` set: Prometheus in multiprocess mode with
``/metrics`` served; ``xsm_tracing`` with the OpenTelemetry SDK and a batch processor
feeding an exporter that drops every span). Every ``BATCH`` tasks the worker switches mode
by subscribing or unsubscribing the exporters on the fact stream: ``off`` (the defaults:
structured logs and the status board only), ``metrics`` (the ``xsm_*`` subscriber and the
app-wide ``celery_task_*`` counters on Celery's signals, so every task is counted),
``tracing``; the order rotates each cycle. Modes are compared batch against batch of the same cycle, in the same process and
on the same connection, because the shared machine's load drifts by more than the costs
measured. Targets: metrics keep >= 95% of off, tracing >= 90%. Run: ``python -m bench
observability`` (Redis on 127.0.0.1:6379, or ``XSM_BENCH_REDIS``).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import redis
from celery import Celery
from celery.signals import task_prerun, task_success

from bench.solo_worker import drain
from bench.timing import per_call_us, table
from xsm_celery import hooks
from xsm_celery.celery import ChartTask
from xsm_celery.patterns import RetryPolicy

REDIS = os.environ.get("XSM_BENCH_REDIS", "redis://127.0.0.1:6379/12")

#: Tasks per batch, and cycles (each runs every mode once, in a rotating order).
BATCH = 100
CYCLES = 60
MODES = ("off", "metrics", "tracing")
TARGETS = {"metrics": 0.95, "tracing": 0.90}


def _tracing_sdk() -> None:
    """A global SDK provider whose exporter drops every span (the cost without a backend)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class DropExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    trace.set_tracer_provider(provider)


app = Celery("bench_observability", broker=REDIS)
app.conf.update(
    task_ignore_result=True,
    worker_prefetch_multiplier=4,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    xsm_dead_letter_store="memory://bench",
    xsm_timer_store="sqlite://",
    xsm_attempt_markers=os.environ.get("XSM_BENCH_MARKERS"),
)
if os.environ.get("XSM_BENCH_KEY"):
    app.conf.xsm_metrics_port = 0
    app.conf.xsm_tracing = True
    _tracing_sdk()


@app.task(name="bench.obs_noop", base=ChartTask, retry_policy=RetryPolicy(max_attempts=3))
def obs_noop() -> None:
    """Succeeds at once, under the retry chart."""


class Switch:
    """Turns the exporters on and off between batches and times each batch."""

    def __init__(self) -> None:
        self.exporters: dict[str, Any] = {}
        #: The worker's ``AppTaskMetrics`` (Celery-signal counters), on in ``metrics`` only.
        self.app_tasks: Any = None
        self.mode = "off"
        self.started = 0.0
        self.done = 0
        self.times: dict[str, list[float]] = {mode: [] for mode in MODES}

    def find_exporters(self) -> None:
        """The Prometheus and tracing subscribers the worker installed, then switch off."""
        for subscriber in hooks.subscribers():
            owner = type(getattr(subscriber, "__self__", None)).__name__
            if owner == "PrometheusMetrics":
                self.exporters["metrics"] = subscriber
            elif owner == "Tracing":
                self.exporters["tracing"] = subscriber
        for subscriber in self.exporters.values():
            hooks.unsubscribe(subscriber)
        from xsm_celery.metrics.worker import started

        running = started(app)
        self.app_tasks = getattr(running, "app_tasks", None)
        if self.app_tasks is not None:
            self.exporters["app_tasks"] = self.app_tasks
            self.app_tasks.disconnect()

    def enter(self, mode: str) -> None:
        """Make ``mode`` the current one: subscribe its exporter only."""
        for name, subscriber in self.exporters.items():
            if name == "app_tasks":
                continue
            hooks.unsubscribe(subscriber)
            if name == mode:
                hooks.subscribe(subscriber)
        if self.app_tasks is not None:
            if mode == "metrics":
                self.app_tasks.connect()
            else:
                self.app_tasks.disconnect()
        self.mode = mode
        self.started = time.perf_counter()

    def order(self, cycle: int) -> list[str]:
        """The modes of ``cycle``, rotated so no mode always runs first."""
        shift = cycle % len(MODES)
        return [*MODES[shift:], *MODES[:shift]]

    def before_task(self) -> None:
        """At each batch boundary, close the batch and start the next mode."""
        if self.done % BATCH:
            return
        batch = self.done // BATCH
        if batch:
            self.times[self.mode].append(time.perf_counter() - self.started)
        cycle, slot = divmod(batch, len(MODES))
        self.enter(self.order(cycle)[slot])


_switch = Switch()


@task_prerun.connect
def _before(**_: Any) -> None:
    if _switch.done == 0 and not _switch.exporters:
        _switch.find_exporters()
    _switch.before_task()


@task_success.connect
def _after(**_: Any) -> None:
    _switch.done += 1
    if _switch.done == BATCH * len(MODES) * CYCLES:
        _switch.times[_switch.mode].append(time.perf_counter() - _switch.started)
        found = sorted(_switch.exporters)
        payload = json.dumps({"times": _switch.times, "exporters": found})
        redis.Redis.from_url(REDIS).set(os.environ["XSM_BENCH_KEY"], payload)


def _run() -> dict[str, Any]:
    """Fill a fresh queue, drain it with one solo worker, return its batch times."""
    total = BATCH * len(MODES) * CYCLES

    def fill(producer: Celery, conn: Any, queue: str) -> None:
        for _ in range(total):
            producer.send_task(obs_noop.name, queue=queue, connection=conn)

    raw = drain(
        "bench.bench_observability",
        REDIS,
        fill,
        drop_env=("PROMETHEUS_MULTIPROC_DIR",),
        timeout_s=600,
        what=obs_noop.name,
    )
    result: dict[str, Any] = json.loads(raw)
    return result


def _handler_cost_us() -> dict[str, float]:
    """Microseconds one attempt costs each exporter, in this process.

    For ``metrics``: its two facts, plus the prerun and postrun receivers of the app-wide
    counters (called directly: this module's own prerun receiver switches modes).
    """
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from prometheus_client import CollectorRegistry

    from xsm_celery.hooks import FactKind
    from xsm_celery.metrics.app_tasks import AppTaskMetrics
    from xsm_celery.metrics.logs import FactLogger
    from xsm_celery.metrics.prometheus import PrometheusMetrics
    from xsm_celery.metrics.tracing import Tracing

    class DropExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    def attempt() -> None:
        hooks.emit(FactKind.ATTEMPT_STARTED, task="bench.obs_noop", attempt=1, traceparent=None)
        hooks.emit(
            FactKind.ATTEMPT_FINISHED,
            task="bench.obs_noop",
            attempt=1,
            outcome="succeeded",
            exception=None,
            duration_s=0.001,
        )

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    exporters = {
        "metrics": PrometheusMetrics(CollectorRegistry()).handle,
        "tracing": Tracing(provider).handle,
    }
    stop_logs = hooks.subscribe(FactLogger().handle)
    base = per_call_us(attempt, number=5000)
    costs = {"off": 0.0}
    for mode, handler in exporters.items():
        stop = hooks.subscribe(handler)
        costs[mode] = max(0.0, per_call_us(attempt, number=5000) - base)
        stop()
    stop_logs()
    provider.shutdown()
    app_tasks = AppTaskMetrics(CollectorRegistry(), "bench@host")
    task = app.tasks[obs_noop.name]

    def signals_of_one_task() -> None:
        app_tasks._on_prerun(task_id="t", task=task)
        app_tasks._on_postrun(task_id="t", task=task, retval=None, state="SUCCESS")

    costs["metrics"] += per_call_us(signals_of_one_task, number=5000)
    return costs


def main() -> None:
    """Print each mode's tasks/s and its ratio to ``off`` within the same cycle."""
    result = _run()
    if result["exporters"] != ["app_tasks", "metrics", "tracing"]:
        raise RuntimeError(f"the worker did not install both exporters: {result['exporters']}")
    times = result["times"]
    rows = []
    for mode in MODES:
        rates = [BATCH / t for t in times[mode]]
        paired = [o / t for o, t in zip(times["off"], times[mode], strict=True)]
        target = f">= {TARGETS[mode]:.0%}" if mode in TARGETS else ""
        rows.append(
            [
                mode,
                f"{statistics.median(rates):,.0f}",
                f"{max(rates):,.0f}",
                f"{statistics.median(paired):.1%}",
                target,
            ]
        )
    headers = [
        "no-op ChartTask, one solo worker, Redis",
        "median tasks/s",
        "best tasks/s",
        "of off (median of cycles)",
        "target",
    ]
    print(table(headers, rows))
    print(f"\n{CYCLES} cycles of {BATCH}-task batches per mode, order rotating, one worker")
    costs = _handler_cost_us()
    per_task_us = 1e6 / statistics.median(BATCH / t for t in times["off"])
    cost_rows = [
        [mode, f"{costs[mode]:.1f}", f"{per_task_us / (per_task_us + costs[mode]):.1%}"]
        for mode in MODES
    ]
    print()
    print(table(["exporter", "cost per attempt (us)", "implied share of off"], cost_rows))
    print(f"\nimplied share: the worker's median {per_task_us:,.0f} us per task, plus the cost")


if __name__ == "__main__":
    main()
