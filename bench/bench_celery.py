"""Throughput of a chart-retry task against plain Celery ``autoretry_for``, same Redis and worker.

Four scenarios, each a fresh queue pre-filled with N messages and drained by one ``celery
worker -P solo`` process running this module: a task that succeeds at once and a task that
fails once (then succeeds on its retry, countdown 0), each as a ``ChartTask`` and as a plain
task with ``autoretry_for`` (both acknowledged late, the chart task's default, so the
figures compare the chart's cost and not two delivery guarantees). The worker times from the
start of its first task to its N-th success and writes the figure to Redis, with the CPU time
it spent (the last column: on a shared machine the wall clock swings with the other
processes, the CPU time much less). Run: ``python -m bench.bench_celery`` (needs Redis on
127.0.0.1:6379, or ``XSM_BENCH_REDIS``).

Profile: ``XSM_BENCH_PROFILE=out.prof`` makes the worker run under cProfile from its first
task to its N-th success (``XSM_BENCH_PROFILE_CLOCK=cpu`` counts CPU time, not wall time);
``py-spy record --subprocesses -f raw`` on this module shows the worker without cProfile's
inflation of Python calls. Where the time went, 1,500 tasks each, solo worker, Redis, on a
2-core machine shared with other jobs (load 4-7):

* Before: the chart kept 69-75% of the plain task's throughput when it succeeds at once and
  41-75% when it fails once. Succeeds at once: the attempt marker's ``send`` was 8% of the
  worker's samples: each ``SET`` woke Redis, which on a busy machine took the CPU from the
  worker, so the send cost a scheduling round, not a syscall. Starting an interpreter for a
  run that decides nothing was another 7%. Fails once: Celery's ``handle_retry`` (19% of the
  samples) copies every traceback frame's code positions (2,341 for Celery's own
  ``trace_task``, paid by both tasks) and formats the traceback; the chart raised its
  ``Retry`` inside ``Task.retry``, six frames deep. Its own run cost (engine restore and step,
  snapshot, a JSON parse and re-dump of the snapshot to mask the error chain, a second parse
  of the header for the attempt facts) was 10%; Celery's republish (``Task.retry`` ->
  ``send_task`` -> kombu's ``_put``, which builds a new redis-py client per publish) 20%.
* Changed: markers are sent with ``MSG_MORE`` and pushed once per bunch of 32
  (``redis_markers``); a first run of the shipped chart calls the function before any
  interpreter and hands a failure to the chart (``machine.first_attempt``); the ``Retry`` is
  raised from ``ChartTask.__call__`` (two frames for Celery to copy and format); the error
  chain is masked on the live context before the one snapshot dump; the facts take the
  checked header's attempt.
* After: succeeds at once, the chart's own share of the worker is the function call, the
  marker (2% of the samples) and the two facts. Fails once, both tasks pay the same
  ``handle_retry`` (the copy of ``trace_task``'s positions does not shrink) and the same
  republish, so the chart's remaining own cost, the engine restoring and stepping the chart
  (about 5% of the worker), is what separates them. Measured then (best of 3-5, load 4-7):
  succeeds at once 103-129% of the plain task (CPU per task 101%), fails once 82-90% of
  ``autoretry_for`` (CPU per task 88%).
* Then (cProfile, CPU clock, 1,000 fail-once tasks on a quiet machine): Celery's retry
  (``Task.retry`` -> ``send_task`` -> kombu's ``_put``, which builds a redis-py client and its
  case-insensitive callback table per publish) was 19% of the chart task's worker and
  ``handle_retry`` 8%, the same calls ``autoretry_for`` makes; the chart's own run 12%: the
  retry's restore and step 3.4%, the first failure's interpreter 2.3%, the attempt facts
  (built for the status board and fact logger, which read none of them) 1.5%. Changed: a
  retry of the shipped chart whose header has the shape the chart wrote for that attempt
  runs the function before any interpreter (the engine shows at bind time that a success
  from each such snapshot ends the chart, ``machine.first_attempt``). Measured after (best
  of 5, one other job running): succeeds at once 105% (median 93%, CPU per task 97%), fails
  once 111% (median 107%, CPU per task 104%). Those runs also had the worker's default
  subscribers take only the fact kinds they read, so no attempt facts were built; that was
  put back (the metrics/tracing budget of ``bench_observability`` is measured against the
  defaults, and fell to 94% / 89% with the cheaper baseline), which costs these figures
  about 2-3 points on the no-op task.
  What is left of the chart's own cost on a fail-once task is the first failure (an
  interpreter, the error chain, one snapshot dump) and the marker: 1.15x would need the
  chart to skip Celery's republish or its ``handle_retry``, which the visible retry needs.
* Then (one failing delivery through Celery's own tracer in one process, ``build_tracer``,
  500 each, wall clock, quiet machine): 1.41 ms for ``autoretry_for``, 1.43 ms for the chart.
  Celery's ``handle_retry`` is 0.97 ms and 0.77 ms of that: billiard's ``ExceptionInfo``
  copies the code positions of every frame in the traceback (``_Code``: 0.65 / 0.54 ms, the
  tracer's own ``trace_task`` alone has 2,341) and formats it (0.28 / 0.20 ms). The chart's
  traceback is shorter (the ``Retry`` is raised in ``__call__``), so it pays 0.2 ms less
  there; without ``handle_retry`` the chart's delivery costs 0.14 ms more than
  ``autoretry_for``'s (the first failure's interpreter, masking the error chain, the header,
  the facts). Every way out of ``trace_task`` other than a success (``Retry``, ``Ignore``,
  ``Reject``, an exception) builds that ``ExceptionInfo`` with ``trace_task``'s frame at its
  head, and a success would fire ``task_success``, the success event and the link
  callbacks, so a retry that stays visible pays it like Celery's own. With the publish
  (``Task.retry`` -> ``send_task`` -> kombu, 0.3 ms) the same for both, the fail-once task
  measured 102% of ``autoretry_for`` (CPU per task 101%); 1.15x would need a third of the
  retry's cost to go, which only a change in Celery or billiard can give (building the
  ``ExceptionInfo`` lazily, or caching copied positions per code object).
* Changed: Celery's tracer takes the class that records a task's outcome as a parameter
  (``build_tracer(..., Info=...)``). A chart task's worker tracer is Celery's own rebuilt with
  ``ChartTraceInfo`` (``xsm_celery.celery.tracer``), which records the chart's retry (a
  ``ChartRetry``) with the same backend write, ``on_retry``, ``task_retry`` signal, log line
  and ``task-retried`` event, but with the retry's own line as its traceback text instead of
  billiard's copy and format of the frames. Measured after (best of 5, quiet machine):
  fails once 150% of ``autoretry_for`` (median 161%, CPU per task 157%).
* Under cProfile pure-Python work is inflated against syscalls, so the chart looks better
  there than on the wall clock; the table below is the wall clock, best and median of five.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import redis
from celery import Celery
from celery.signals import task_prerun, task_success

from bench.solo_worker import drain
from bench.timing import table
from xsm_celery.celery import ChartTask
from xsm_celery.patterns import RetryPolicy

REDIS = os.environ.get("XSM_BENCH_REDIS", "redis://127.0.0.1:6379/12")

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


_done = {"n": 0, "t0": 0.0, "cpu0": 0.0}
_profiler: list[Any] = []
#: The worker's CPU time per task of every run, by task name (ms; immune to other processes).
_cpu_ms: dict[str, list[float]] = {}


@task_prerun.connect
def _start(**_: Any) -> None:
    """The clock starts when the first task starts (worker start-up is not counted)."""
    if not _done["t0"]:
        _done["t0"] = time.perf_counter()
        _done["cpu0"] = time.process_time()
        if os.environ.get("XSM_BENCH_PROFILE"):
            import cProfile

            cpu = os.environ.get("XSM_BENCH_PROFILE_CLOCK") == "cpu"
            _profiler.append(cProfile.Profile(time.process_time) if cpu else cProfile.Profile())
            _profiler[0].enable()


@task_success.connect
def _count(**_: Any) -> None:
    """Stop the clock at the expected N-th success (set by XSM_BENCH_EXPECT)."""
    _done["n"] += 1
    expect = int(os.environ.get("XSM_BENCH_EXPECT", "0"))
    if _done["n"] == expect:
        elapsed = time.perf_counter() - _done["t0"]
        cpu = time.process_time() - _done["cpu0"]
        if _profiler:
            _profiler[0].disable()
            _profiler[0].dump_stats(os.environ["XSM_BENCH_PROFILE"])
        redis.Redis.from_url(REDIS).set(os.environ["XSM_BENCH_KEY"], f"{expect} {elapsed} {cpu}")


def _run(task: Any, n: int) -> float:
    """Fill a fresh queue with ``n`` messages, drain it with a solo worker, return tasks/s."""

    def fill(producer: Celery, conn: Any, queue: str) -> None:
        for _ in range(n):
            producer.send_task(task.name, queue=queue, connection=conn)

    raw = drain("bench.bench_celery", REDIS, fill, env={"XSM_BENCH_EXPECT": str(n)},
                what=task.name)  # fmt: skip
    count, elapsed, cpu = raw.decode().split()
    _cpu_ms.setdefault(task.name, []).append(float(cpu) * 1000 / int(count))
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
        pc, cc = min(_cpu_ms[plain.name]), min(_cpu_ms[chart.name])
        rows.append(
            [
                label,
                f"{p:,.0f}",
                f"{c:,.0f}",
                f"{c / p:.0%}",
                f"{pm:,.0f} / {cm:,.0f} ({cm / pm:.0%})",
                f"{pc:.2f} / {cc:.2f} ({pc / cc:.0%})",
            ]
        )
    headers = ["solo worker, Redis", "autoretry_for tasks/s", "ChartTask tasks/s", "chart/plain"]
    print(table([*headers, "medians (ratio)", "CPU ms/task, least (ratio)"], rows))
    print(
        f"\nbest of {ROUNDS} runs each; {NOOP_N} / {FAIL_ONCE_N} tasks per run; targets: "
        ">= 95% when it succeeds at once, >= 115% when it fails once"
    )


if __name__ == "__main__":
    main()
