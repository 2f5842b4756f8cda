"""A workflow's stores, opened once per process from its ``store=`` value.

The value names one database, and the snapshots, inbox receipts, timer rows, outbox rows and
transition log of a step are all written in its transaction (``WorkflowStores``, built by
``xsm_celery.persistence.opening``):

* ``"django"`` / ``"django://<alias>"``: the Django app's tables on that alias;
* a SQLAlchemy URL (``sqlite:///orders.db``, ``postgresql://...``): ``SQLAlchemyStore`` and
  the stores built over its connection (on PostgreSQL a step's transaction is the
  fewer-round-trip ``postgres_session``);
* ``"memory://"``: in-process stores, for tests;
* a ``StateStore`` object: its own ``workflow_family()`` (the SQLAlchemy and Django stores
  offer one; a ``MemoryStore`` gets in-process siblings), or ``WorkflowStores(...)`` given
  whole.

Stores are opened lazily, once per process (never across a fork), like the chart tasks' ones.
"""

from __future__ import annotations

import threading
from typing import Any

from xsm_celery.persistence.family import MemoryJournal, WorkflowStores
from xsm_celery.persistence.opening import open_store
from xsm_celery.process import current_pid

__all__ = ["MemoryJournal", "StoresOnce", "WorkflowStores", "open_workflow_stores"]


def open_workflow_stores(value: Any) -> WorkflowStores:
    """The ``WorkflowStores`` a workflow's ``store=`` value names (see the module docstring).

    Raises:
        ConfigurationError: the value names no store this package can open; the message
            lists the accepted forms.
    """
    return open_store(value, "workflow", setting="the workflow's store")


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
