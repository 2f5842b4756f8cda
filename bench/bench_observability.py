"""Cost of metrics and tracing on a no-op chart task: tasks/s with each on, against off.

Three modes of the same ``ChartTask`` on one ``celery worker -P solo`` over the same Redis,
alternated round by round: ``off`` (the defaults: structured logs and the status board
subscribed, no exporter), ``metrics`` (``xsm_metrics_port`` set: Prometheus in multiprocess
mode, ``/metrics`` served) and ``tracing`` (``xsm_tracing`` with the OpenTelemetry SDK and
a batch processor feeding an exporter that drops everything). Each run fills a fresh queue
with N messages; the worker times from its first task to its N-th success. Targets: metrics
keep >= 95% of off, tracing >= 90%. Run: ``python -m bench observability`` (Redis on
127.0.0.1:6379, or ``XSM_BENCH_REDIS``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.signals import task_prerun, task_success

from bench.timing import table
from xsm_celery.celery import ChartTask
from xsm_celery.patterns import RetryPolicy

REDIS = os.environ.get("XSM_BENCH_REDIS", "redis://127.0.0.1:6379/12")
ROOT = Path(__file__).resolve().parent.parent
MODE = os.environ.get("XSM_BENCH_MODE", "off")

#: Messages per run and runs per mode (modes alternate; the best run of each is reported).
N = 2000
ROUNDS = 7
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
if MODE == "metrics":
    app.conf.xsm_metrics_port = 0
if MODE == "tracing":
    app.conf.xsm_tracing = True
    _tracing_sdk()


@app.task(name="bench.obs_noop", base=ChartTask, retry_policy=RetryPolicy(max_attempts=3))
def obs_noop() -> None:
    """Succeeds at once, under the retry chart."""


_done = {"n": 0, "t0": 0.0}


@task_prerun.connect
def _start(**_: Any) -> None:
    """The clock starts when the first task starts (worker start-up is not counted)."""
    if not _done["t0"]:
        _done["t0"] = time.perf_counter()


@task_success.connect
def _count(**_: Any) -> None:
    """Stop the clock at the expected N-th success (set by XSM_BENCH_EXPECT)."""
    _done["n"] += 1
    expect = int(os.environ.get("XSM_BENCH_EXPECT", "0"))
    if _done["n"] == expect:
        elapsed = time.perf_counter() - _done["t0"]
        redis.Redis.from_url(REDIS).set(os.environ["XSM_BENCH_KEY"], f"{expect} {elapsed}")


def _run(mode: str, n: int) -> float:
    """Fill a fresh queue with ``n`` messages, drain it with a solo worker, return tasks/s."""
    queue, key = f"bench-{uuid.uuid4().hex[:8]}", f"bench-result-{uuid.uuid4().hex}"
    producer = Celery("bench_producer", broker=REDIS)
    with producer.connection_for_write() as conn:
        for _ in range(n):
            producer.send_task(obs_noop.name, queue=queue, connection=conn)
    env = {**os.environ, "XSM_BENCH_EXPECT": str(n), "XSM_BENCH_KEY": key,
           "XSM_BENCH_MODE": mode, "PYTHONPATH": str(ROOT)}  # fmt: skip
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    args = [sys.executable, "-m", "celery", "-A", "bench.bench_observability", "worker",
            "-P", "solo", "-Q", queue, "-l", "ERROR", "--without-gossip", "--without-mingle",
            "--without-heartbeat"]  # fmt: skip
    client = redis.Redis.from_url(REDIS)
    with tempfile.TemporaryDirectory() as cwd:
        log = Path(cwd) / "worker.log"
        with log.open("wb") as out:
            worker = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=out)
            try:
                deadline = time.monotonic() + 120
                while client.get(key) is None:
                    if time.monotonic() > deadline or worker.poll() is not None:
                        tail = log.read_text(errors="replace")[-2000:]
                        raise RuntimeError(f"the {mode} worker did not finish:\n{tail}")
                    time.sleep(0.05)
            finally:
                worker.terminate()
                worker.wait(timeout=30)
    count, elapsed = client.get(key).decode().split()  # type: ignore[union-attr]
    client.delete(key, queue)
    producer.close()
    return int(count) / float(elapsed)


def main() -> None:
    """Print tasks/s per mode and each mode's share of ``off``.

    The machine is shared, so its load drifts during a run: besides the best and the median
    rate of each mode, the ratio of each round (a mode against the ``off`` run next to it)
    is taken, and their median reported, which the drift affects least.
    """
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(ROUNDS):
        for mode in MODES:
            rates[mode].append(_run(mode, N))
    best_off = max(rates["off"])
    rows = []
    for mode in MODES:
        best, median = max(rates[mode]), statistics.median(rates[mode])
        paired = statistics.median(r / o for r, o in zip(rates[mode], rates["off"], strict=True))
        target = f">= {TARGETS[mode]:.0%}" if mode in TARGETS else ""
        rows.append([mode, f"{best:,.0f}", f"{best / best_off:.0%}", f"{median:,.0f}",
                     f"{paired:.0%}", target])  # fmt: skip
    headers = ["no-op ChartTask, solo worker, Redis", "best tasks/s", "best of off",
               "median tasks/s", "paired ratio (median)", "target"]  # fmt: skip
    print(table(headers, rows))
    print(f"\n{ROUNDS} rounds, modes alternating within each; {N} tasks per run")


if __name__ == "__main__":
    main()
