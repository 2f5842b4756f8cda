"""``StepContext``: everything the step machinery reads of a workflow, in one frozen object.

``Workflow`` (``api``) is what users call; the step, its Celery task, the payload builders
and the Beat scan need only what was fixed when the workflow was declared: its name and
chart, its step task and queue, its policies, and the stores it opens in each process. They
take this record, never the ``Workflow``, so no module of the machinery calls back into the
user-facing class, and what a step depends on is visible in one place.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.celery.settings import DEFAULT_STORE_URL, read_settings
from xsm_celery.celery.workflow.checks import check_instance_key
from xsm_celery.celery.workflow.stores import StoresOnce, WorkflowStores
from xsm_celery.engine import Machine
from xsm_celery.patterns import DeadLetterPlugin, RetryPolicy
from xsm_celery.process import current_pid

__all__ = ["TASK_ATTEMPTS_KEY", "WORKFLOW_STORE_SETTING", "StepContext"]

logger = logging.getLogger("xsm_celery.workflow")

#: Private context key of the runs the last failed task step made, so a dead-letter state
#: its error leads to (a saga's ``compensationFailed``) records them as its ``attempts``.
TASK_ATTEMPTS_KEY = "_xsm_task_attempts"

#: The setting naming the store of workflows that do not pass ``store=``.
WORKFLOW_STORE_SETTING = "xsm_workflow_store"


@dataclass(frozen=True)
class StepContext:
    """A workflow as its steps see it (built once by ``Workflow``; see the module docstring).

    Attributes:
        app: The Celery app.
        name: The workflow's name (``xsm.workflow.<name>``, store keys ``<name>:<key>``).
        machine: The chart.
        task: The workflow's step task (its ``name``, ``signature``, ``apply_async``).
        queue: The queue its step messages go to; None for Celery's routing.
        retry_policy: How failing steps are retried before their dead letter.
        lock_timeout_s: Seconds a step waits for the instance's lock.
        inbox_ttl_s: Seconds an applied message id is remembered.
        outbox_topic: Topic of the chart's ``meta.publish`` envelopes, or None.
        store: The ``store=`` the workflow was declared with; None reads
            ``xsm_workflow_store`` when the stores are first opened.
        invocations: ``{invoke id: id of the state that invokes it}`` of the chart.
        dead_letter_sink: The step's buffer for dead letters (``step.buffer_dead_letter``),
            given by ``Workflow`` so this record does not import the step that uses it.
    """

    app: Any
    name: str
    machine: Machine
    task: Any
    queue: str | None
    retry_policy: RetryPolicy
    lock_timeout_s: float
    inbox_ttl_s: float | None
    outbox_topic: str | None
    store: Any
    invocations: Mapping[str, str]
    #: Where the dead-letter plugin puts a record: the running step keeps it until it commits.
    dead_letter_sink: Callable[[Any], None]
    _opened: dict[str, StoresOnce] = field(default_factory=dict, compare=False, repr=False)
    _plugins: dict[int, tuple[Any, ...]] = field(default_factory=dict, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def stores(self) -> WorkflowStores:
        """The workflow's stores in this process (opened on first use, never across a fork).

        The setting is read then, not when the workflow is declared, so a project may set
        ``xsm_workflow_store`` after the module that declares its workflows was imported.
        """
        once = self._opened.get("stores")
        if once is None:
            value = self.store
            if value is None:
                value = self.app.conf.get(WORKFLOW_STORE_SETTING) or DEFAULT_STORE_URL
            once = self._opened.setdefault("stores", StoresOnce(value))
        return once.get()

    def store_key(self, key: str) -> str:
        """The store key of instance ``key`` (``<workflow>:<key>``), checked."""
        return check_instance_key(self.name, key)

    def user_key(self, store_key: str) -> str:
        """The business key of a store key."""
        return store_key[len(self.name) + 1 :]

    @property
    def countdown_max_s(self) -> float:
        """Timers due within this many seconds are countdown messages; longer ones rows."""
        return float(read_settings(self.app).timer_countdown_max_s)

    @property
    def recovery_grace_s(self) -> float:
        """Seconds a timer may be overdue before the Beat scan re-publishes its message."""
        return float(read_settings(self.app).workflow_recovery_grace_s)

    def plugins(self) -> tuple[Any, ...]:
        """Plugins every step attaches, built once per process (they hold its stores).

        Entering a state tagged ``dead-letter`` (a saga's ``compensationFailed``) buffers a
        dead letter that is stored once the step committed; with ``outbox_topic`` the chart's
        publications become outbox rows in the step's transaction.
        """
        pid = current_pid()
        found = self._plugins.get(pid)
        if found is None:
            with self._lock:
                found = self._plugins.get(pid)
                if found is None:
                    found = self._plugins[pid] = self._build_plugins()
        return found

    def _build_plugins(self) -> tuple[Any, ...]:
        plugins: list[Any] = [
            DeadLetterPlugin(self.dead_letter_sink, report=False, attempt_key=TASK_ATTEMPTS_KEY)
        ]
        outbox = self.stores().outbox
        if self.outbox_topic and outbox is not None:
            from xsm_celery.eda.outbox import OutboxPlugin

            plugins.append(OutboxPlugin(outbox, self.outbox_topic))
        return tuple(plugins)

    def summary(self, store_key: str, interp: Any) -> dict[str, Any]:
        """The instance row the Django admin lists: machine, key, state, status, update."""
        return {
            "workflow": self.name,
            "key": self.user_key(store_key),
            "machine_id": str(self.machine.id),
            "state": ", ".join(sorted(interp.current_state_ids)),
            "status": str(interp.status),
            "updated_at": time.time(),
        }

    def revoke(self, task_id: str) -> None:
        """Revoke a task step whose state was left; best-effort (it may have run already)."""
        try:
            self.app.control.revoke(task_id)
        except Exception as exc:
            logger.info("workflow %s: could not revoke task %s: %s", self.name, task_id, exc)
