"""The demo's live view: one row per task, updated from the progress log."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich import box
from rich.table import Table
from rich.text import Text

from xsm_celery.demo.progress import ProgressEvent

__all__ = ["Board", "Row"]

_STYLE = {
    "queued": "dim",
    "running": "cyan",
    "worker died": "bold red",
    "retrying": "yellow",
    "succeeded": "bold green",
    "dead-lettered": "bold magenta",
}


@dataclass
class Row:
    """What the view shows for one task."""

    order_id: str
    upstream: str
    task_id: str
    attempt: int = 0
    status: str = "queued"
    next_delay_ms: float | None = None
    last_error: str = ""

    @property
    def final(self) -> bool:
        """Whether the task has ended (succeeded or dead-lettered)."""
        return self.status in ("succeeded", "dead-lettered")


class Board:
    """Rows in the order tasks were sent; events move them along."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}

    def add(self, order_id: str, upstream: str, task_id: str) -> None:
        """Show a task that was just sent."""
        self.rows[task_id] = Row(order_id, upstream, task_id)

    def apply(self, events: Iterable[ProgressEvent]) -> list[str]:
        """Move rows along and say what happened, one line per event of a task shown."""
        lines = []
        for event in events:
            row = self.rows.get(event.task_id)
            if row is not None:
                _move(row, event)
                line = _line(row, event)
                if line:
                    lines.append(line)
        return lines

    def done(self) -> bool:
        """Whether every task shown has ended."""
        return all(row.final for row in self.rows.values())

    def pending(self) -> list[Row]:
        """The tasks that have not ended."""
        return [row for row in self.rows.values() if not row.final]

    def render(self, title: str = "tasks") -> Table:
        """The table of tasks: order, what the upstream does, attempt, status, next delay."""
        table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column("Order", no_wrap=True)
        table.add_column("Upstream", no_wrap=True)
        table.add_column("Attempt", justify="right")
        table.add_column("Status", no_wrap=True)
        table.add_column("Next delay", justify="right", no_wrap=True)
        table.add_column("Last error", no_wrap=True, overflow="ellipsis", max_width=64)
        for row in self.rows.values():
            delay = "" if row.next_delay_ms is None else f"{row.next_delay_ms:,.0f} ms"
            table.add_row(
                row.order_id,
                row.upstream,
                str(row.attempt or ""),
                Text(row.status, style=_STYLE.get(row.status, "")),
                delay,
                row.last_error,
            )
        return table


def _line(row: Row, event: ProgressEvent) -> str:
    """One log line for an event: which order, which attempt, what happened next."""
    head = f"{row.order_id:<16} attempt {event.attempt or '?'}: "
    if event.kind == "redelivered":
        return head + "its worker process was killed; the broker redelivered the message"
    if event.kind == "retrying":
        return head + f"{_short(event.detail)} -> retry in {event.delay_ms or 0:,.0f} ms"
    if event.kind == "succeeded":
        return head + f"succeeded ({event.detail})"
    if event.kind == "failed":
        return head + f"gave up: {_short(event.detail)} -> dead letter"
    return ""


def _short(detail: str, limit: int = 80) -> str:
    """An error for a log line: a lost worker by its type, anything else cut at ``limit``."""
    if detail.startswith("WorkerLost"):
        return "WorkerLost"
    return detail if len(detail) <= limit else detail[: limit - 3] + "..."


def _move(row: Row, event: ProgressEvent) -> None:
    row.attempt = max(row.attempt, event.attempt or 0)
    if event.kind == "started":
        row.status, row.next_delay_ms = "running", None
    elif event.kind == "redelivered":
        row.status, row.next_delay_ms = "worker died", None
        row.last_error = f"WorkerLost: attempt {event.attempt}'s worker was killed"
    elif event.kind == "retrying":
        row.status, row.next_delay_ms = "retrying", event.delay_ms
        row.last_error = event.detail or row.last_error
    elif event.kind == "succeeded":
        row.status, row.next_delay_ms = "succeeded", None
    elif event.kind == "failed":
        row.status, row.next_delay_ms = "dead-lettered", None
        row.last_error = event.detail or row.last_error
