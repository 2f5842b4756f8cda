"""Rich renderings of dead letters: the list table, one record's detail, its error chain.

Kept apart from the commands so that the demo shows its dead letters exactly as an
operator will see them with ``xsm-celery dlq list``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from xsm_celery.patterns.dead_letter import DeadLetter
from xsm_celery.patterns.dead_letter.workflow import workflow_of_record

__all__ = [
    "audit_table",
    "dead_letter_detail",
    "dead_letters_table",
    "error_chain_table",
    "make_console",
    "when",
]


#: Columns used when the output is not a terminal.
PIPE_WIDTH = 180


def when(epoch: float | None) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM:SS`` UTC, or an empty string."""
    if epoch is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch))


def _subject(record: DeadLetter) -> str:
    """What failed: the task name, else the envelope type, else the machine and state."""
    if record.task_name:
        return record.task_name
    if record.envelope:
        return str(record.envelope.get("type") or record.machine_id)
    return record.state_id or record.machine_id


def _last_error(record: DeadLetter) -> str:
    if not record.errors:
        return ""
    last = record.errors[-1]
    return f"{last.get('type', '')}: {last.get('message', '')}".strip(": ")


def dead_letters_table(records: Sequence[DeadLetter], *, title: str | None = None) -> Table:
    """One row per record: id, reason, what failed, attempts, last error, times.

    A "Workflow instance" column (``order[o-42]``) is added when a record belongs to one.
    """
    table = Table(title=title, box=box.SIMPLE_HEAD, header_style="bold", expand=False)
    table.add_column("Id", no_wrap=True, style="cyan", min_width=36)
    table.add_column("Reason", no_wrap=True, min_width=13)
    table.add_column("Task / machine", overflow="fold", min_width=12)
    owners = [workflow_of_record(record) for record in records]
    with_owner = any(owners)
    if with_owner:
        table.add_column("Workflow instance", overflow="fold", min_width=10)
    table.add_column("Tries", justify="right", min_width=5)
    table.add_column("Last error", overflow="fold", min_width=16, max_width=60)
    table.add_column("Taken (UTC)", no_wrap=True, min_width=19)
    table.add_column("Resolved", no_wrap=True, min_width=8)
    for record, owner in zip(records, owners, strict=True):
        table.add_row(
            record.id,
            record.reason,
            _subject(record),
            *([Text(str(owner or ""))] if with_owner else []),
            "" if record.attempts is None else str(record.attempts),
            _last_error(record),
            when(record.taken_at),
            when(record.resolved_at),
        )
    return table


def error_chain_table(errors: Iterable[dict[str, Any]]) -> Table:
    """The error chain oldest first, one row per failed attempt."""
    table = Table(title="Error chain (oldest first)", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("#", justify="right")
    for name in ("Source", "Name", "Type"):
        table.add_column(name, no_wrap=True)
    table.add_column("Message", overflow="fold")
    for number, error in enumerate(errors, start=1):
        table.add_row(
            str(number),
            str(error.get("source", "")),
            str(error.get("name", "")),
            str(error.get("type", "")),
            str(error.get("message", "")),
        )
    return table


def audit_table(entries: Sequence[dict[str, Any]]) -> Table:
    """Operator actions on a record: when, who, what, why, and what came of it."""
    table = Table(title="Audit", box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("At (UTC)", "Actor", "Action", "Reason", "Outcome"):
        table.add_column(name, overflow="fold")
    for entry in entries:
        table.add_row(
            when(entry.get("at")),
            str(entry.get("actor", "")),
            str(entry.get("action", "")),
            str(entry.get("reason", "")),
            str(entry.get("outcome", "")),
        )
    return table


def _fields(record: DeadLetter) -> Table:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    rows = [
        ("id", record.id),
        ("reason", record.reason),
        ("machine", record.machine_id),
        ("state", record.state_id),
        ("event", str(record.event.get("type", ""))),
        ("attempts", record.attempts),
        ("taken", when(record.taken_at)),
        ("resolved", when(record.resolved_at)),
        ("task", record.task_name),
        ("task id", record.task_id),
        ("hostname", record.hostname),
        ("topic", record.topic),
        ("chart hash", record.machine_hash),
        ("chart version", record.machine_version),
    ]
    owner = workflow_of_record(record)
    if owner is not None:
        rows[4:4] = [
            ("workflow", owner.workflow),
            ("workflow key", owner.key),
            ("workflow part", owner.part.value),
        ]
    for label, value in rows:
        if value not in (None, ""):
            table.add_row(label, Text(str(value)))
    return table


def _json_block(label: str, value: Any) -> RenderableType:
    text = json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)
    return Group(Text(label, style="bold"), Syntax(text, "json", background_color="default"))


def dead_letter_detail(record: DeadLetter, audit: Sequence[dict[str, Any]]) -> Group:
    """Everything about one record, in the order an operator triages it."""
    parts: list[RenderableType] = [_fields(record), Text(""), error_chain_table(record.errors)]
    if record.task_args is not None or record.task_kwargs is not None:
        parts.append(
            _json_block(
                "Task arguments (redacted)",
                {"args": record.task_args, "kwargs": record.task_kwargs},
            )
        )
    if record.envelope is not None:
        parts.append(_json_block("Envelope (redacted)", record.envelope))
    if record.snapshot:
        parts.append(_json_block("Snapshot (redacted)", record.snapshot))
    if audit:
        parts.append(audit_table(audit))
    return Group(*parts)


def make_console(*, stderr: bool = False) -> Console:
    """A console on the current stdout (or stderr), so test runners capture what it prints.

    Piped into a file or a log, rich would assume 80 columns and squeeze the table's
    columns away; without a terminal (and without ``COLUMNS``) the width is generous.
    """
    console = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console
