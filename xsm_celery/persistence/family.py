"""The stores one workflow writes in a step, all sharing the snapshot store's transaction.

A workflow step saves the snapshot, the inbox receipt of its event, its timer rows, its
outbox rows and its transition log in one transaction, so a store setting names one database
and everything else is opened over it: that group is a ``WorkflowStores``. A snapshot store
that can build its group offers ``workflow_family()`` (``WorkflowFamilySource``); the
SQLAlchemy and Django stores do, and ``memory_family`` builds the in-process one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from xsm_celery.persistence.inbox import MemoryInbox
from xsm_celery.persistence.protocols import Inbox, StateStore, TimerStore
from xsm_celery.persistence.timers import MemoryTimerStore

__all__ = [
    "MemoryJournal",
    "WorkflowFamilySource",
    "WorkflowJournal",
    "WorkflowStores",
    "memory_family",
]


class WorkflowJournal(Protocol):
    """Where a step records the instance's summary and the transitions it took."""

    def record(self, summary: dict[str, Any], transitions: list[dict[str, Any]]) -> None:
        """Keep the instance's latest summary and append its transitions."""


class MemoryJournal:
    """The instance summaries and transition log of in-process workflows (tests, memory)."""

    def __init__(self) -> None:
        self.instances: dict[str, dict[str, Any]] = {}
        self.transitions: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def record(self, summary: dict[str, Any], transitions: list[dict[str, Any]]) -> None:
        """Keep the instance's latest summary and append its transitions."""
        with self._lock:
            self.instances[f"{summary['workflow']}:{summary['key']}"] = dict(summary)
            self.transitions.extend(dict(t) for t in transitions)

    def recent(self, workflow: str, key: str, limit: int = 50) -> list[dict[str, Any]]:
        """The newest transitions of one instance, newest first."""
        with self._lock:
            mine = [t for t in self.transitions if t["workflow"] == workflow and t["key"] == key]
        return list(reversed(mine))[:limit]


@dataclass
class WorkflowStores:
    """Snapshots, inbox, timers, optional outbox and journal of one workflow.

    ``shared`` tells whether the inbox and timer rows join the snapshot's transaction; only
    then is a redelivery after a commit guaranteed to be answered from the inbox. ``session``
    opens a step's transaction (``workflow_session``); None means ``generic_session``.
    """

    snapshots: StateStore
    inbox: Inbox
    timers: TimerStore
    #: An ``xsm_celery.eda.outbox_protocols.OutboxStore`` (a layer above this one), or None.
    outbox: Any = None
    journal: WorkflowJournal | None = None
    shared: bool = True
    description: str = field(default="", compare=False)
    #: Entered inside the step's lock: lets nested writes join its transaction directly.
    flat: Callable[[], AbstractContextManager[Any]] = field(
        default=contextlib.nullcontext, compare=False
    )
    session: Callable[..., AbstractContextManager[Any]] | None = field(default=None, compare=False)


@runtime_checkable
class WorkflowFamilySource(Protocol):
    """A snapshot store that opens the inbox, timers, outbox and journal sharing its database."""

    def workflow_family(self) -> WorkflowStores:
        """The stores a workflow over this snapshot store writes, in its transactions."""


def memory_family(snapshots: StateStore, description: str = "memory://") -> WorkflowStores:
    """In-process stores around ``snapshots`` (tests, ``memory://``): nothing is shared."""
    return WorkflowStores(
        snapshots=snapshots,
        inbox=MemoryInbox(),
        timers=MemoryTimerStore(),
        journal=MemoryJournal(),
        description=description,
    )
