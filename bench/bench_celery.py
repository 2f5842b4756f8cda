"""Throughput of a chart-retry task against plain Celery ``autoretry_for``, same Redis and worker.

Two scenarios, each drained by one ``celery worker -P solo`` process running this module: a
task that succeeds at once and a task that fails once (then succeeds on its retry,
countdown 0), each as a ``ChartTask`` and as a plain task with ``autoretry_for`` (both
acknowledged late, the chart task's default, so the figures compare the chart's cost and
not two delivery guarantees). Run: ``python -m bench.bench_celery`` (needs Redis on
127.0.0.1:6379, or ``XSM_BENCH_REDIS``).

* Succeeds at once: one worker drains one queue of ``NOOP_CYCLES`` cycles of a
  ``NOOP_BATCH``-task batch of each task, the order swapped every cycle, and times each
  batch (wall clock and CPU). Batch is compared with batch of the same cycle, because on
  this shared machine the speed of whole runs a few seconds apart differed by more than the
  chart's cost (runs of the same task swung by 40%, even in CPU time per task). The headline
  ratio is the median of the cycles' paired ratios. An A/A control (the same measure on two
  identical plain tasks) read 92-106% by best batch and 93-106% by least CPU over four runs,
  but 99-102% by median of the paired ratios: the best batch of one 100-task batch per side
  cannot tell 95% from 100%, the median of 60 pairs can. The control is printed in every run
  so each table carries its own noise floor.
* Fails once: a fresh queue of N messages per run, a worker per run, alternating plain and
  chart; the worker times from its first task's start to its N-th success. A retry
  interleaves with the next batch's tasks, so batches would not stay apart here.

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
  (``xsm_celery.redis.markers``); a first run of the shipped chart calls the function before any
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
  ``ChartTraceInfo`` (``xsm_celery.celery.task.tracer``), which records the chart's retry (a
  ``ChartRetry``) with the same backend write, ``on_retry``, ``task_retry`` signal, log line
  and ``task-retried`` event, but with the retry's own line as its traceback text instead of
  billiard's copy and format of the frames. Measured after (best of 5, quiet machine):
  fails once 150% of ``autoretry_for`` (median 161%, CPU per task 157%).
* Then (py-spy on the worker of the interleaved no-op batches): the chart task's own
  ``__call__`` was 6% of its delivery; of that the attempt marker was 44%, the attempt facts
  26% (built for the status board and the fact logger, which drop them) and the rest the
  run's bookkeeping. Timed inside the worker, a marker cost 33-44 us against 12-15 us in a
  loop: between two deliveries the worker's own work evicts the marker's code and socket
  state from the CPU caches. Changed: the default subscribers take only the kinds they read
  (no attempt facts are built unless metrics or tracing is on); the marker keeps its socket
  checks and poll object per socket; the run reads Celery's request once. Measured after
  (interleaved batches, quiet machine): succeeds at once 96% of ``autoretry_for`` (best
  batch; median of the cycles' ratios 91-97% over five runs), fails once 179% (median
  118%).
* Then (py-spy at 400 Hz on the interleaved worker, 6,000 deliveries of each task): the chart's
  ``__call__`` was 4.6% of a chart delivery. The marker's ``send`` and its unread-reply
  ``poll`` were 57% of that, and ``os.getpid()`` in ``stores_for`` (asked on every attempt,
  to open the stores once per process) 14%, as much as the ``send``: on this 2-core machine
  a system call is where the scheduler hands the CPU to Redis, so it is charged far more
  than its own cost. Changed: the process id is kept and refreshed by a fork hook
  (``xsm_celery.process``), for ``stores_for`` and the other per-process caches, and for
  ``prometheus_client``'s multiprocess counters, which asked it on every increment; a first
  run takes the direct path with metrics or tracing on too. Measured after (three runs):
  succeeds at once 99 / 98 / 98% of ``autoretry_for`` (median of paired ratios; best batch
  the same, least CPU per task 96-97%), the A/A control 100% in each; fails once 135-136%.
  The poll stays: it is what keeps a held marker safe (see ``xsm_celery.redis.markers``).
* Under cProfile pure-Python work is inflated against syscalls, so the chart looks better
  there than on the wall clock; the table below is the wall clock, best and median of five.
"""

from __future__ import annotations

import json
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

#: The no-op scenario's interleaved batches: tasks per batch and cycles (one batch of each).
NOOP_BATCH = 100
NOOP_CYCLES = 60
#: Messages per fail-once run, and runs, alternating plain and chart. The best run of each is
#: reported (other processes only ever slow a run down), the median beside it.
FAIL_ONCE_N = 1500
ROUNDS = 5

#: Every plain task's options: Celery's own retry, acknowledged late like a chart task.
PLAIN_RETRY: dict[str, Any] = {
    "acks_late": True,
    "autoretry_for": (ConnectionError,),
    "max_retries": 3,
    "default_retry_delay": 0,
}

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


@app.task(name="bench.plain_noop", **PLAIN_RETRY)
def plain_noop() -> None:
    """Succeeds at once, plain Celery."""


@app.task(name="bench.plain_noop_twin", **PLAIN_RETRY)
def plain_noop_twin() -> None:
    """The same task as ``plain_noop`` under another name: the A/A control's second side."""


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
    **PLAIN_RETRY,
)
def plain_fail_once(self: Any) -> None:
    """Fails on its first run, succeeds on the retry, with Celery's autoretry_for."""
    if self.request.retries == 0:
        raise ConnectionError("first run fails")


_done = {"n": 0, "t0": 0.0, "cpu0": 0.0}
_profiler: list[Any] = []
#: The worker's CPU time per task of every run, by task name (ms; immune to other processes).
_cpu_ms: dict[str, list[float]] = {}


class Batches:
    """Times each batch of an interleaved queue in the worker: (task name, seconds, CPU s).

    The queue holds ``NOOP_CYCLES`` cycles of one ``NOOP_BATCH``-task batch of each no-op
    task, the order swapped every cycle. A batch runs from its first task's start to its
    last task's success, so both tasks see the same worker, connection and machine load
    within a second of each other.
    """

    def __init__(self) -> None:
        self.done = 0
        self.started = (0.0, 0.0)
        self.rows: list[tuple[str, float, float]] = []

    def before(self) -> None:
        if self.done % NOOP_BATCH == 0:
            self.started = (time.perf_counter(), time.process_time())

    def after(self, name: str) -> None:
        self.done += 1
        if self.done % NOOP_BATCH == 0:
            wall, cpu = self.started
            self.rows.append((name, time.perf_counter() - wall, time.process_time() - cpu))
        if self.done == NOOP_BATCH * 2 * NOOP_CYCLES:
            redis.Redis.from_url(REDIS).set(os.environ["XSM_BENCH_KEY"], json.dumps(self.rows))


_batches = Batches()


@task_prerun.connect
def _start(**_: Any) -> None:
    """The clock starts when the first task starts (worker start-up is not counted)."""
    if os.environ.get("XSM_BENCH_BATCHES"):
        _batches.before()
        return
    if not _done["t0"]:
        _done["t0"] = time.perf_counter()
        _done["cpu0"] = time.process_time()
        if os.environ.get("XSM_BENCH_PROFILE"):
            import cProfile

            cpu = os.environ.get("XSM_BENCH_PROFILE_CLOCK") == "cpu"
            _profiler.append(cProfile.Profile(time.process_time) if cpu else cProfile.Profile())
            _profiler[0].enable()


@task_success.connect
def _count(sender: Any = None, **_: Any) -> None:
    """Stop the clock at the expected N-th success (set by XSM_BENCH_EXPECT)."""
    if os.environ.get("XSM_BENCH_BATCHES"):
        _batches.after(str(sender.name))
        return
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

    raw = drain("bench.bench_celery", REDIS, fill, env={"XSM_BENCH_EXPECT": str(n)}, what=task.name)
    count, elapsed, cpu = raw.decode().split()
    _cpu_ms.setdefault(task.name, []).append(float(cpu) * 1000 / int(count))
    return int(count) / float(elapsed)


def _interleaved(plain: Any, chart: Any) -> list[tuple[str, float, float]]:
    """Drain one queue of alternating batches of ``plain`` and ``chart`` with one worker."""

    def fill(producer: Celery, conn: Any, queue: str) -> None:
        for cycle in range(NOOP_CYCLES):
            for task in (plain, chart) if cycle % 2 == 0 else (chart, plain):
                for _ in range(NOOP_BATCH):
                    producer.send_task(task.name, queue=queue, connection=conn)

    raw = drain(
        "bench.bench_celery",
        REDIS,
        fill,
        env={"XSM_BENCH_BATCHES": "1"},
        timeout_s=300,
        what="the interleaved batches",
    )
    return [(str(name), float(wall), float(cpu)) for name, wall, cpu in json.loads(raw)]


def _noop_row(plain: Any, chart: Any, label: str) -> list[str]:
    """The no-op scenario: batch against batch of the same cycle, in one worker.

    The headline ratio is the median of the cycles' paired ratios (each chart batch against
    the plain batch next to it); the best batch of each and the least CPU per task are shown
    beside it.
    """
    rows = _interleaved(plain, chart)
    wall = {name: [w for n, w, _ in rows if n == name] for name in (plain.name, chart.name)}
    cpu = {name: [c for n, _, c in rows if n == name] for name in (plain.name, chart.name)}
    rates = {name: [NOOP_BATCH / w for w in walls] for name, walls in wall.items()}
    paired = [p / c for p, c in zip(wall[plain.name], wall[chart.name], strict=True)]
    p, c = max(rates[plain.name]), max(rates[chart.name])
    pc = min(cpu[plain.name]) * 1000 / NOOP_BATCH
    cc = min(cpu[chart.name]) * 1000 / NOOP_BATCH
    pm, cm = statistics.median(rates[plain.name]), statistics.median(rates[chart.name])
    return _row(label, statistics.median(paired), (p, c), (pm, cm), (pc, cc))


def _fail_once_row(plain: Any, chart: Any) -> list[str]:
    """The fail-once scenario: whole runs, alternating; the ratio of the medians of ``ROUNDS``."""
    plain_rates, chart_rates = [], []
    for _ in range(ROUNDS):
        plain_rates.append(_run(plain, FAIL_ONCE_N))
        chart_rates.append(_run(chart, FAIL_ONCE_N))
    p, c = max(plain_rates), max(chart_rates)
    pm, cm = statistics.median(plain_rates), statistics.median(chart_rates)
    pc, cc = min(_cpu_ms[plain.name]), min(_cpu_ms[chart.name])
    return _row("fails once", cm / pm, (p, c), (pm, cm), (pc, cc))


def _row(
    label: str,
    ratio: float,
    best: tuple[float, float],
    medians: tuple[float, float],
    cpu_ms: tuple[float, float],
) -> list[str]:
    """One table row: the headline ratio, (plain, other) best and median tasks/s, least CPU."""
    (p, c), (pm, cm), (pc, cc) = best, medians, cpu_ms
    return [
        label,
        f"{ratio:.0%}",
        f"{p:,.0f} / {c:,.0f} ({c / p:.0%})",
        f"{pm:,.0f} / {cm:,.0f}",
        f"{pc:.2f} / {cc:.2f} ({pc / cc:.0%})",
    ]


def main() -> None:
    """Print the chart task's share of plain Celery's throughput per scenario, and the noise."""
    rows = [
        _noop_row(plain_noop, chart_noop, "succeeds at once"),
        _fail_once_row(plain_fail_once, chart_fail_once),
        _noop_row(plain_noop, plain_noop_twin, "A/A control (plain / plain)"),
    ]
    headers = [
        "solo worker, Redis",
        "chart/plain",
        "best tasks/s (ratio)",
        "median tasks/s",
        "CPU ms/task, least (ratio)",
    ]
    print(table(headers, rows))
    print(
        f"\nsucceeds at once: {NOOP_CYCLES} cycles of one {NOOP_BATCH}-task batch of each task "
        "in one worker; chart/plain is the median of the cycles' paired ratios. Fails once: "
        f"{ROUNDS} runs of {FAIL_ONCE_N} tasks each, a worker per run; chart/plain is the "
        "ratio of the medians. The A/A control runs the no-op measure on two identical plain "
        "tasks: its distance from 100% is this run's noise. Targets: >= 95% when it succeeds "
        "at once, >= 115% when it fails once"
    )


if __name__ == "__main__":
    main()
