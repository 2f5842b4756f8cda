"""The stores one workflow writes in a step, all sharing the snapshot store's transaction.

A workflow step saves the snapshot, the inbox receipt of its event, its timer rows, its
outbox rows and its transition log (Django, SQLAlchemy, memory) in one transaction, so the
store setting names one database and everything else is opened over it:

* ``"django"`` / ``"django://<alias>"``: the Django app's tables on that alias;
* a SQLAlchemy URL (``sqlite:///orders.db``, ``postgresql://...``): ``SQLAlchemyStore`` and
  the inbox, timer, outbox and transition-log stores built over its connection (on
  PostgreSQL a step's transaction is the fewer-round-trip ``postgres_session``);
* ``"memory://"``: in-process stores, for tests;
* a ``StateStore`` object: used as is; its siblings are derived when it is one of the
  package's stores, or passed with ``WorkflowStores(...)``.

Stores are opened lazily, once per process (never across a fork), like the chart tasks' ones.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from xsm_celery.celery.django_stores import is_django_url
from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.inbox import MemoryInbox
from xsm_celery.persistence.memory import MemoryStore
from xsm_celery.persistence.timers import MemoryTimerStore
from xsm_celery.process import current_pid

__all__ = ["MemoryJournal", "StoresOnce", "WorkflowStores", "open_workflow_stores"]


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

    snapshots: Any
    inbox: Any
    timers: Any
    outbox: Any = None
    journal: Any = None
    shared: bool = True
    description: str = field(default="", compare=False)
    #: Entered inside the step's lock: lets nested writes join its transaction directly.
    flat: Callable[[], AbstractContextManager[Any]] = field(
        default=contextlib.nullcontext, compare=False
    )
    session: Callable[..., AbstractContextManager[Any]] | None = field(default=None, compare=False)


def open_workflow_stores(value: Any) -> WorkflowStores:
    """The ``WorkflowStores`` a workflow's ``store=`` value names (see the module docstring).

    Raises:
        ConfigurationError: the value names no store this package can open; the message
            lists the accepted forms.
    """
    if isinstance(value, WorkflowStores):
        return value
    if is_django_url(value):
        return _django(value)
    if isinstance(value, str):
        if value.startswith("memory://"):
            return _memory(MemoryStore(), value)
        return _sqlalchemy(value)
    if all(callable(getattr(value, m, None)) for m in ("load", "save", "lock")):
        return _from_object(value)
    raise ConfigurationError(
        f"workflow store {value!r} is not a StateStore or a store URL; give 'django', "
        "'postgresql://user@host/db', 'sqlite:///orders.db', 'memory://' or a StateStore"
    )


def _memory(store: Any, description: str) -> WorkflowStores:
    return WorkflowStores(
        snapshots=store,
        inbox=MemoryInbox(),
        timers=MemoryTimerStore(),
        journal=MemoryJournal(),
        description=description,
    )


def _django(value: str) -> WorkflowStores:
    from xsm_celery.celery.django_stores import open_django_store

    snapshots = open_django_store(value, "snapshots")
    from xsm_celery.django.stores.workflows import DjangoWorkflowJournal

    alias = snapshots.using
    return WorkflowStores(
        snapshots=snapshots,
        inbox=open_django_store(value, "inbox"),
        timers=open_django_store(value, "timers"),
        outbox=open_django_store(value, "outbox"),
        journal=DjangoWorkflowJournal(using=alias),
        description=value,
    )


def _sqlalchemy(url: str) -> WorkflowStores:
    from xsm_celery.sqlalchemy import SQLAlchemyStore

    return _sqlalchemy_siblings(SQLAlchemyStore(url), url)


def _sqlalchemy_siblings(store: Any, description: str) -> WorkflowStores:
    from xsm_celery.sqlalchemy import SQLAlchemyInbox, SQLAlchemyOutboxStore
    from xsm_celery.sqlalchemy.journal import SQLAlchemyWorkflowJournal
    from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore
    from xsm_celery.sqlalchemy.workflow_session import postgres_session

    postgres = store.db.dialect == "postgresql"
    return WorkflowStores(
        snapshots=store,
        inbox=SQLAlchemyInbox(store),
        timers=SQLAlchemyTimerStore(store.db),
        outbox=SQLAlchemyOutboxStore(store),
        journal=SQLAlchemyWorkflowJournal(store),
        description=description,
        flat=store.db.flat,
        session=partial(postgres_session, store, log=True) if postgres else None,
    )


def _from_object(store: Any) -> WorkflowStores:
    if isinstance(store, MemoryStore):
        return _memory(store, repr(store))
    module = type(store).__module__
    if module.startswith("xsm_celery.sqlalchemy"):
        return _sqlalchemy_siblings(store, repr(store))
    if module.startswith("xsm_celery.django"):
        return _django(f"django://{store.using}" if store.using else "django")
    raise ConfigurationError(
        f"workflow store {store!r} is a StateStore this package does not know, so its inbox "
        "and timers cannot share its transaction; pass WorkflowStores(snapshots=..., "
        "inbox=..., timers=...) instead"
    )


_cache_lock = threading.Lock()


class StoresOnce:
    """The ``WorkflowStores`` of one owner, opened on first use in each process (never
    shared across a fork: a database connection must not cross one)."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self._opened: tuple[int, WorkflowStores] | None = None

    def get(self) -> WorkflowStores:
        """The stores in this process."""
        pid = current_pid()
        opened = self._opened
        if opened is None or opened[0] != pid:
            with _cache_lock:
                opened = self._opened
                if opened is None or opened[0] != pid:
                    opened = self._opened = (pid, open_workflow_stores(self.value))
        return opened[1]
