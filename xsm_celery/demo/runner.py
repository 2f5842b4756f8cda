"""``python -m xsm_celery.demo``: chart-driven retry, dead letters and a replay, live.

The demo starts a real Celery worker on an embedded SQLite broker (or on ``XSM_BROKER_URL``),
sends seven quote requests to a scripted flaky upstream, and shows each task's attempts and
retry delays as they happen. Then it lists the dead letters exactly as ``xsm-celery dlq
list`` would, fixes the upstream for one order, and replays that order's dead letter.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from xsm_celery.cli.render import make_console

__all__ = ["SCENARIOS", "main"]

#: (order id, upstream behaviour, fail_times, what the view says the upstream does).
SCENARIOS: tuple[tuple[str, str, int, str], ...] = (
    ("A-1001", "ok", 0, "answers"),
    ("A-1002", "flaky", 1, "times out once"),
    ("A-1003", "flaky", 2, "times out twice"),
    ("A-1004", "down", 0, "is down"),
    ("A-1005", "down", 0, "is down"),
    ("A-1006", "malformed", 0, "answers nonsense"),
    ("A-1007", "crash", 0, "kills the worker"),
)

#: The order whose dead letter the demo replays once its upstream is fixed.
REPLAYED_ORDER = "A-1004"

#: Files of an earlier run that a new run removes (and nothing else in the folder).
_OUR_FILES = ("broker", "dead_letters", "timers", "progress", "upstream")

WORKER_START_S = 60.0
TASKS_S = 60.0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; 0 when every task ended as scripted and the replay succeeded."""
    del argv
    console = make_console()
    data = Path(os.environ.get("XSM_DEMO_DIR", "demo-data")).resolve()
    _fresh(data)
    # The demo's Celery app reads its folder from the environment when imported, in this
    # process and in the worker alike, so the variable is set before the first import.
    os.environ["XSM_DEMO_DIR"] = str(data)
    from xsm_celery.celery.stores import stores_for
    from xsm_celery.demo.app import app
    from xsm_celery.demo.worker import WorkerProcess

    started = time.monotonic()
    broker = os.environ.get("XSM_BROKER_URL") or "embedded SQLite (kombu sqlalchemy transport)"
    console.rule("[bold]xsm_celery demo: chart-driven retry for Celery tasks")
    console.print(f"data: {data}\nbroker: {_mask(broker)}\nstarting a Celery worker (prefork)...")
    # Create the store tables here, once, rather than in three pool processes at once.
    stores = stores_for(app)
    stores.dead_letters(), stores.timers(), stores.markers()
    worker = WorkerProcess(data)
    try:
        return _run(console, data, worker, started)
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130
    finally:
        stopping = time.monotonic()
        worker.stop()
        console.print(f"worker stopped in {time.monotonic() - stopping:.1f} s")


def _run(console: Console, data: Path, worker: Any, started: float) -> int:
    from xsm_celery.demo.app import QUEUE, app, fetch_quote
    from xsm_celery.demo.board import Board
    from xsm_celery.demo.progress import ProgressLog
    from xsm_celery.demo.upstream import Behaviour, FlakyUpstream

    progress, upstream = ProgressLog(data / "progress.db"), FlakyUpstream(data / "upstream.db")
    _purge(app, QUEUE)
    if not worker.wait_ready(progress, WORKER_START_S):
        console.print("[red]the worker did not start[/]; its log ends with:\n" + worker.log_tail())
        return 1
    console.print(f"worker ready after {time.monotonic() - started:.1f} s\n")
    board = Board()
    for order_id, kind, fail_times, label in SCENARIOS:
        upstream.script(order_id, Behaviour(kind, fail_times))
        board.add(order_id, label, fetch_quote.apply_async((order_id,), queue=QUEUE).id)
    seen = _follow(console, board, progress, 0, title="quote requests")
    if not board.done():
        return _stalled(console, board, worker)
    store = _dead_letter_store(app)
    _show_dead_letters(console, store)
    return _replay(console, app, store, upstream, progress, seen, worker, started)


def _follow(console: Console, board: Any, progress: Any, seen: int, *, title: str) -> int:
    """Redraw the board as events arrive until every task ended; return the last seq."""
    deadline = time.monotonic() + TASKS_S
    with Live(board.render(title), console=console, refresh_per_second=8) as live:
        while not board.done() and time.monotonic() < deadline:
            events = progress.since(seen)
            if events:
                seen = events[-1].seq
                for line in board.apply(events):
                    live.console.print(line, markup=False, highlight=False)
                live.update(board.render(title))
            time.sleep(0.1)
        live.update(board.render(title))
    console.print()
    return seen


def _stalled(console: Console, board: Any, worker: Any) -> int:
    waiting = ", ".join(f"{row.order_id} ({row.status})" for row in board.pending())
    console.print(f"[red]timed out waiting for {waiting}[/]; the worker log ends with:")
    console.print(worker.log_tail(), markup=False)
    return 1


def _dead_letter_store(app: Any) -> Any:
    from xsm_celery.sqlalchemy import open_dead_letter_store

    return open_dead_letter_store(app.conf.xsm_dead_letter_store)


def _show_dead_letters(console: Console, store: Any) -> None:
    from xsm_celery.cli.render import dead_letters_table

    records = store.list()
    console.print()
    console.print(dead_letters_table(records, title=f"dead letters ({len(records)})"))
    for record in records:
        chain = " -> ".join(e.get("type", "?") for e in record.errors)
        console.print(f"  {record.task_args[0] if record.task_args else '?'}: {record.reason}, "
                      f"{record.attempts} attempt(s), error chain: {chain}", markup=False)


def _replay(console: Console, app: Any, store: Any, upstream: Any, progress: Any, seen: int,
            worker: Any, started: float) -> int:
    from xsm_celery.celery import replay_task
    from xsm_celery.demo.board import Board

    record = next((r for r in store.list() if r.task_args == [REPLAYED_ORDER]), None)
    if record is None:
        console.print(f"[red]no dead letter for {REPLAYED_ORDER}[/]")
        return 1
    console.print(f"\nThe upstream for {REPLAYED_ORDER} is fixed; replaying dead letter "
                  f"{record.id}:")
    upstream.heal(REPLAYED_ORDER)
    dry = replay_task(store, record.id, app, reason="upstream fixed", dry_run=True)
    console.print(f"  {dry.outcome}", markup=False)
    real = replay_task(store, record.id, app, reason="upstream fixed", dry_run=False,
                       actor="xsm-demo")
    console.print(f"  replayed: {real.outcome}", markup=False)
    board = Board()
    board.add(f"{REPLAYED_ORDER} (replay)", "answers", str(real.task_id))
    _follow(console, board, progress, seen, title="replay")
    if not board.done():
        return _stalled(console, board, worker)
    _summary(console, app, store, record.id, started)
    return 0 if all(row.status == "succeeded" for row in board.rows.values()) else 1


def _summary(console: Console, app: Any, store: Any, record_id: str, started: float) -> None:
    [entry] = store.audit_log(record_id)[-1:]
    console.print(f"audit: {entry['actor']} {entry['action']} ({entry['reason']}): "
                  f"{entry['outcome']}", markup=False)
    url = app.conf.xsm_dead_letter_store
    console.print(f"\ndone in {time.monotonic() - started:.1f} s. Inspect the dead letters with:")
    console.print(f"  xsm-celery dlq --dlq {url} list --all", markup=False)
    console.print(f"  xsm-celery dlq --dlq {url} show {record_id}", markup=False)


def _fresh(data: Path) -> None:
    """Create the folder and remove the files of an earlier run, and only those."""
    data.mkdir(parents=True, exist_ok=True)
    for name in _OUR_FILES:
        for suffix in (".db", ".db-wal", ".db-shm", ".db-journal"):
            with contextlib.suppress(FileNotFoundError):
                (data / f"{name}{suffix}").unlink()
    with contextlib.suppress(FileNotFoundError):
        (data / "worker.log").unlink()
    # The broker keeps task arguments unredacted: readable by its owner only.
    os.close(os.open(data / "broker.db", os.O_CREAT | os.O_WRONLY, 0o600))


def _purge(app: Any, queue: str) -> None:
    """Drop messages a previous, interrupted run left on a shared broker's demo queue."""
    from kombu import Queue

    with contextlib.suppress(Exception), app.connection_for_write() as conn:
        Queue(queue, channel=conn.default_channel).purge()


def _mask(url: str) -> str:
    from xsm_celery.sqlalchemy.connect import safe_url

    return safe_url(url) if "://" in url else url


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
