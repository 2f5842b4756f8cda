"""Throughput of a chart-retry task against plain Celery ``autoretry_for``, same Redis and worker.

Four scenarios, each a fresh queue pre-filled with N messages and drained by one ``celery
worker -P solo`` process running this module: a task that succeeds at once and a task that
fails once (then succeeds on its retry, countdown 0), each as a ``ChartTask`` and as a plain
task with ``autoretry_for`` (both acknowledged late, the chart task's default, so the
figures compare the chart's cost and not two delivery guarantees). The worker times from the start of its first task to its N-th
success and writes the figure to Redis. Run: ``python -m bench.bench_celery`` (needs Redis on
127.0.0.1:6379, or ``XSM_BENCH_REDIS``).

Profile (``XSM_BENCH_PROFILE=out.prof`` makes the worker run under cProfile from its first
task to its N-th success; 2,000 tasks each, solo worker, Redis, before this module's targets
were worked on):

* succeeds at once: of 6.05 s, the chart's ``execute`` took 0.89 s against nothing for the plain
  task; 0.60 s of it was the attempt-marker write (redis-py's generic command packer, then a
  ``recv`` of the previous reply per attempt), 0.29 s the chart step (start, ``work``, final
  state). The rest, in both tasks, is the worker's own Redis traffic: BRPOP, the unacked-index
  pipeline and the ack pipeline (about 60% of the worker's time). So the marker became a
  hand-packed ``SET`` whose replies are read in bunches of 32 (one ``send`` per attempt), which
  made it 3-4x cheaper, and the chart step is the engine's ordinary path.
* fails once: 27.6 s for the chart task against 32.0 s for ``autoretry_for``. Both pay Celery's
  republish (``Task.retry`` -> ``send_task`` -> ``publish``: 6.0 s / 8.1 s) and Celery's
  ``handle_retry``, whose ``ExceptionInfo`` copies every traceback frame's ``co_positions`` and
  formats the traceback (4.4 s / 4.8 s; ``autoretry_for`` also formats the chained original
  error). The chart computes its countdown without an exception and raises ``Retry`` outside
  any ``except`` block, so nothing is chained; its remaining own cost was the two marker writes
  (1.2 s) and one snapshot restore. The ``Retry`` stays: it is what gives Celery users the
  ``RETRY`` state, the ``task_retry`` signal and the ``task-retried`` event.
* Under cProfile pure-Python work is inflated against syscalls, so the chart looks better
  there than on the wall clock; the table below is the wall clock, best and median of five.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
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

#: Messages per scenario run, and runs per scenario, alternating plain and chart. The best
#: run of each is reported (other processes only ever slow a run down), the median beside it.
NOOP_N = 3000
FAIL_ONCE_N = 1500
ROUNDS = 5

app = Celery("bench_celery", broker=REDIS)
app.conf.update(
    task_ignore_result=True,
    worker_prefetch_multiplier=4,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    xsm_dead_letter_store="memory://bench",
    xsm_timer_store="sqlite://",
    xsm_attempt_markers=os.environ.get("XSM_BENCH_MARKERS"),
)


@app.task(
    name="bench.chart_noop", base=ChartTask, retry_policy=RetryPolicy(max_attempts=3, base_ms=0)
)
def chart_noop() -> None:
    """Succeeds at once, under the retry chart."""


@app.task(
    name="bench.plain_noop",
    acks_late=True,
    autoretry_for=(ConnectionError,),
    max_retries=3,
    default_retry_delay=0,
)
def plain_noop() -> None:
    """Succeeds at once, plain Celery."""


@app.task(
    name="bench.chart_fail_once",
    base=ChartTask,
    bind=True,
    retry_policy=RetryPolicy(max_attempts=3, base_ms=0),
)
def chart_fail_once(self: Any) -> None:
    """Fails on its first run, succeeds on the retry, under the retry chart."""
    if self.request.retries == 0:
        raise ConnectionError("first run fails")


@app.task(
    name="bench.plain_fail_once",
    bind=True,
    acks_late=True,
    autoretry_for=(ConnectionError,),
    max_retries=3,
    default_retry_delay=0,
)
def plain_fail_once(self: Any) -> None:
    """Fails on its first run, succeeds on the retry, with Celery's autoretry_for."""
    if self.request.retries == 0:
        raise ConnectionError("first run fails")


_done = {"n": 0, "t0": 0.0}
_profiler: list[Any] = []


@task_prerun.connect
def _start(**_: Any) -> None:
    """The clock starts when the first task starts (worker start-up is not counted)."""
    if not _done["t0"]:
        _done["t0"] = time.perf_counter()
        if os.environ.get("XSM_BENCH_PROFILE"):
            import cProfile

            _profiler.append(cProfile.Profile())
            _profiler[0].enable()


@task_success.connect
def _count(**_: Any) -> None:
    """Stop the clock at the expected N-th success (set by XSM_BENCH_EXPECT)."""
    _done["n"] += 1
    expect = int(os.environ.get("XSM_BENCH_EXPECT", "0"))
    if _done["n"] == expect:
        elapsed = time.perf_counter() - _done["t0"]
        if _profiler:
            _profiler[0].disable()
            _profiler[0].dump_stats(os.environ["XSM_BENCH_PROFILE"])
        redis.Redis.from_url(REDIS).set(os.environ["XSM_BENCH_KEY"], f"{expect} {elapsed}")


def _run(task: Any, n: int) -> float:
    """Fill a fresh queue with ``n`` messages, drain it with a solo worker, return tasks/s."""
    queue, key = f"bench-{uuid.uuid4().hex[:8]}", f"bench-result-{uuid.uuid4().hex}"
    producer = Celery("bench_producer", broker=REDIS)
    with producer.connection_for_write() as conn:
        for _ in range(n):
            producer.send_task(task.name, queue=queue, connection=conn)
    env = {**os.environ, "XSM_BENCH_EXPECT": str(n), "XSM_BENCH_KEY": key, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "celery", "-A", "bench.bench_celery", "worker", "-P", "solo",
            "-Q", queue, "-l", "ERROR", "--without-gossip", "--without-mingle",
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
                        raise RuntimeError(f"the worker did not finish {task.name}:\n{tail}")
                    time.sleep(0.05)
            finally:
                worker.terminate()
                worker.wait(timeout=30)
    count, elapsed = client.get(key).decode().split()  # type: ignore[union-attr]
    client.delete(key, queue)
    producer.close()
    return int(count) / float(elapsed)


def main() -> None:
    """Print tasks/s for each scenario and the chart task's share of plain Celery's."""
    rows = []
    for label, chart, plain, n in (
        ("succeeds at once", chart_noop, plain_noop, NOOP_N),
        ("fails once", chart_fail_once, plain_fail_once, FAIL_ONCE_N),
    ):
        plain_rates, chart_rates = [], []
        for _ in range(ROUNDS):
            plain_rates.append(_run(plain, n))
            chart_rates.append(_run(chart, n))
        p, c = max(plain_rates), max(chart_rates)
        pm, cm = statistics.median(plain_rates), statistics.median(chart_rates)
        rows.append(
            [
                label,
                f"{p:,.0f}",
                f"{c:,.0f}",
                f"{c / p:.0%}",
                f"{pm:,.0f} / {cm:,.0f} ({cm / pm:.0%})",
            ]
        )
    headers = ["solo worker, Redis", "autoretry_for tasks/s", "ChartTask tasks/s", "chart/plain"]
    print(table([*headers, "medians (ratio)"], rows))
    print(
        f"\nbest of {ROUNDS} runs each; {NOOP_N} / {FAIL_ONCE_N} tasks per run; targets: "
        ">= 95% when it succeeds at once, >= 115% when it fails once"
    )


if __name__ == "__main__":
    main()
