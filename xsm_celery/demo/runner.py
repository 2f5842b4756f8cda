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

from xsm_celery.cli.render import dead_letters_table, make_console

__all__ = ["REPLAYED_ORDER", "SCENARIOS", "main"]

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
_OUR_FILES = ("broker", "dead_letters", "timers", "progress", "upstream", "workflows")

#: Seconds allowed for the worker to start, and for a batch of tasks to end.
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
    demo = Demo(console, data)
    try:
        return demo.run()
    except KeyboardInterrupt:
        console.print("interrupted")
        return 130
    finally:
        demo.stop()


class Demo:
    """One run: the worker, the stores it writes, and the view of what happens."""

    def __init__(self, console: Console, data: Path) -> None:
        from xsm_celery.celery.stores import stores_for
        from xsm_celery.demo.app import app
        from xsm_celery.demo.app import orders as app_orders
        from xsm_celery.demo.progress import ProgressLog
        from xsm_celery.demo.upstream import FlakyUpstream
        from xsm_celery.demo.worker import WorkerProcess

        self.console, self.data, self.app = console, data, app
        self.started = time.monotonic()
        self.progress = ProgressLog(data / "progress.db")
        self.upstream = FlakyUpstream(data / "upstream.db")
        broker = os.environ.get("XSM_BROKER_URL") or "embedded SQLite (kombu sqlalchemy transport)"
        console.rule("[bold]xsm_celery demo: chart-driven retry for Celery tasks")
        console.print(f"data: {data}\nbroker: {_mask(broker)}\nstarting a Celery worker...")
        # Create the stores' tables here, once, rather than in three pool processes at once.
        stores = stores_for(app)
        self.store = stores.dead_letters()
        stores.timers(), stores.markers()
        app_orders.stores()
        self.seen = 0
        self.worker = WorkerProcess(data)

    def run(self) -> int:
        """Send the requests, follow them, list the dead letters, replay one."""
        from kombu.exceptions import OperationalError

        from xsm_celery.demo.app import QUEUE, fetch_quote
        from xsm_celery.demo.board import Board
        from xsm_celery.demo.upstream import Behaviour

        try:
            _purge(self.app, QUEUE)
        except OperationalError as exc:
            self.console.print(f"[red]cannot reach the broker[/]: {exc}", markup=True)
            return 1
        if not self.worker.wait_ready(self.progress, WORKER_START_S):
            self.console.print("[red]the worker did not start[/]; its log ends with:")
            self.console.print(self.worker.log_tail(), markup=False)
            return 1
        self.console.print(f"worker ready after {time.monotonic() - self.started:.1f} s\n")
        board = Board()
        for order_id, kind, fail_times, label in SCENARIOS:
            self.upstream.script(order_id, Behaviour(kind, fail_times))
            board.add(order_id, label, fetch_quote.apply_async((order_id,), queue=QUEUE).id)
        if not self._follow(board, "quote requests"):
            return 1
        self._show_dead_letters()
        if self._replay() != 0:
            return 1
        return self._orders()

    def stop(self) -> None:
        """Stop the worker (warm shutdown)."""
        self.worker.stop()

    def _follow(self, board: Any, title: str) -> bool:
        """Log each event and redraw the board until every task ended; False on timeout."""
        deadline = time.monotonic() + TASKS_S
        with Live(board.render(title), console=self.console, refresh_per_second=8) as live:
            while not board.done() and time.monotonic() < deadline:
                events = self.progress.since(self.seen)
                if events:
                    self.seen = events[-1].seq
                    for line in board.apply(events):
                        live.console.print(line, markup=False, highlight=False)
                    live.update(board.render(title))
                time.sleep(0.1)
            live.update(board.render(title))
        self.console.print()
        if board.done():
            return True
        waiting = ", ".join(f"{row.order_id} ({row.status})" for row in board.pending())
        self.console.print(f"[red]timed out waiting for {waiting}[/]; the worker log ends with:")
        self.console.print(self.worker.log_tail(), markup=False)
        return False

    def _show_dead_letters(self) -> None:
        records = self.store.list()
        self.console.print(dead_letters_table(records, title=f"dead letters ({len(records)})"))
        for record in records:
            order = record.task_args[0] if record.task_args else "?"
            chain = " -> ".join(e.get("type", "?") for e in record.errors)
            self.console.print(
                f"  {order}: {record.reason} after {record.attempts} attempt(s); "
                f"error chain: {chain}",
                markup=False,
            )

    def _replay(self) -> int:
        from xsm_celery.celery import replay_task
        from xsm_celery.demo.board import Board

        record = next((r for r in self.store.list() if r.task_args == [REPLAYED_ORDER]), None)
        if record is None:
            self.console.print(f"[red]no dead letter for {REPLAYED_ORDER}[/]")
            return 1
        self.console.print(
            f"\nThe upstream for {REPLAYED_ORDER} is fixed; replaying its dead letter {record.id}:"
        )
        self.upstream.heal(REPLAYED_ORDER)
        dry = replay_task(self.store, record.id, self.app, reason="upstream fixed", dry_run=True)
        self.console.print(f"  {dry.outcome}", markup=False)
        real = replay_task(
            self.store,
            record.id,
            self.app,
            reason="upstream fixed",
            dry_run=False,
            actor="xsm-demo",
        )
        self.console.print(f"  replayed: {real.outcome}\n", markup=False)
        board = Board()
        board.add(f"{REPLAYED_ORDER} (replay)", "answers", str(real.task_id))
        if not self._follow(board, "replay"):
            return 1
        self._summary(record.id)
        return 0 if all(row.status == "succeeded" for row in board.rows.values()) else 1

    def _orders(self) -> int:
        from xsm_celery.demo.app import orders
        from xsm_celery.demo.workflow_part import follow_orders

        self.console.print()
        if not follow_orders(self.console, orders, TASKS_S):
            self.console.print(self.worker.log_tail(), markup=False)
            return 1
        self.console.print(f"\ndone in {time.monotonic() - self.started:.1f} s.")
        return 0

    def _summary(self, record_id: str) -> None:
        entry = self.store.audit_log(record_id)[-1]
        self.console.print(
            f"audit: {entry['actor']} {entry['action']} ({entry['reason']}): {entry['outcome']}",
            markup=False,
        )
        url = self.app.conf.xsm_dead_letter_store
        self.console.print(
            f"\ndone in {time.monotonic() - self.started:.1f} s. Inspect the dead letters with:"
        )
        self.console.print(f"  xsm-celery dlq --dlq {url} list --all", markup=False)
        self.console.print(f"  xsm-celery dlq --dlq {url} show {record_id}", markup=False)


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
    """Drop messages a previous, interrupted run left on a shared broker's demo queue.

    Raises:
        kombu.exceptions.OperationalError: the broker cannot be reached.
    """
    from kombu import Exchange, Queue

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        bound = Queue(queue, Exchange(queue, "direct"), routing_key=queue)(conn.default_channel)
        bound.declare()
        bound.purge()


def _mask(url: str) -> str:
    from xsm_celery.sqlalchemy.connect import safe_url

    return safe_url(url) if "://" in url else url


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
