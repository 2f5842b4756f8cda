"""Durable workflows: a user's chart as one persisted instance per business key, on Celery.

::

    xsm = Xsm(app)
    orders = xsm.workflow(order_machine, store="django", queue="orders")

    orders.start("o-42")                        # entry actions run, timers are scheduled
    orders.send("o-42", "PAY", total=99)        # a Celery task message; the AsyncResult
    orders.send_now("o-42", "PAY", total=99)    # the same step in this process
    orders.get("o-42")                          # None, or a WorkflowView

Every event is one step (``xsm_celery.celery.workflow.step``) run by the workflow's task
``xsm.workflow.<name>``: the instance is locked, loaded, sent the event and saved with its
inbox receipt, timer rows and outbox rows in one transaction. ``after`` timers become
countdown messages (or durable rows fired by the ``xsm-fire-timers`` Beat entry when longer
than ``xsm_timer_countdown_max_s``); ``celery_service(task)`` invokes a Celery task as a step
and its result comes back as ``done.invoke.<id>``. See ``docs/workflows.md``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from xsm_celery.celery.worker.timers import register_timer_source
from xsm_celery.celery.workflow import payloads
from xsm_celery.celery.workflow.checks import (
    check_event_id,
    check_workflow_name,
    step_function_name,
)
from xsm_celery.celery.workflow.checks import check_json as _check_json
from xsm_celery.celery.workflow.context import WORKFLOW_STORE_SETTING, StepContext
from xsm_celery.celery.workflow.messages import Dispatch, Message
from xsm_celery.celery.workflow.recovery import recover_overdue
from xsm_celery.celery.workflow.step import StepOutcome, buffer_dead_letter, run_step
from xsm_celery.celery.workflow.stores import WorkflowStores
from xsm_celery.celery.workflow.task import run_step_task
from xsm_celery.celery.workflow.view import WorkflowView, view_of
from xsm_celery.engine import Machine, is_engine_event_type
from xsm_celery.engine.events import to_event
from xsm_celery.errors import ConfigurationError, InvalidEventError
from xsm_celery.ids import new_id
from xsm_celery.patterns import RetryPolicy

__all__ = [
    "DEFAULT_INBOX_TTL_S",
    "WORKFLOW_STORE_SETTING",
    "WORKFLOW_TASK_PREFIX",
    "Workflow",
    "find_workflow",
    "workflow_named",
    "workflows_of",
]

logger = logging.getLogger("xsm_celery.workflow")


#: Prefix of every workflow's step task name (``xsm.workflow.orders``).
WORKFLOW_TASK_PREFIX = "xsm.workflow."

#: Seconds an event id is remembered, so a redelivery within it is answered, not re-run.
DEFAULT_INBOX_TTL_S = 7 * 86_400.0

#: Seconds a step waits for the instance's lock before it is retried (not counted).
DEFAULT_LOCK_TIMEOUT_S = 5.0

_registry: weakref.WeakKeyDictionary[Any, dict[str, Workflow]] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def find_workflow(name: str) -> Workflow | None:
    """The workflow called ``name`` on any app of this process (the admin's lookup)."""
    for table in list(_registry.values()):
        if name in table:
            return table[name]
    return None


def workflows_of(app: Any) -> dict[str, Workflow]:
    """The workflows registered on ``app``, by name."""
    return dict(_registry.get(app, {}))


def workflow_named(app: Any, name: str) -> Workflow:
    """The workflow ``name`` of ``app``.

    Raises:
        ConfigurationError: no such workflow in this process; the worker must import the
            module that calls ``xsm.workflow(...)``.
    """
    found = _registry.get(app, {}).get(name)
    if found is None:
        known = ", ".join(sorted(_registry.get(app, {}))) or "none"
        raise ConfigurationError(
            f"no workflow {name!r} on app {getattr(app, 'main', app)!r} (known: {known}); "
            "import the module that declares it in the worker (Celery's include= or imports)"
        )
    return found


class Workflow:
    """One chart run as durable instances, one per key, by a Celery task.

    Use ``Xsm(app).workflow(machine, ...)`` rather than this class directly.

    Args:
        app: The Celery app.
        machine: The chart (``create_machine(...)``).
        store: ``"django"``, a database URL, ``"memory://"``, a ``StateStore`` or a
            ``WorkflowStores``; default ``app.conf.xsm_workflow_store`` (else
            ``sqlite:///xsm_celery.db``).
        name: The workflow's name (unique per app); default the machine id.
        queue: The Celery queue its step messages (events, timers, completions) go to.
        retry_policy: How failing steps are retried before their dead letter; default
            ``RetryPolicy(max_attempts=5, base_ms=500)``.
        lock_timeout_s: Seconds a step waits for the instance's lock before it is retried.
        inbox_ttl_s: Seconds an event id is remembered for deduplication.
        outbox_topic: Topic of the chart's ``meta.publish`` envelopes (written to the store's
            outbox in the step's transaction); None leaves publications out.
        task_options: More options for the step task (``priority``, ``time_limit``...).
    """

    def __init__(
        self,
        app: Any,
        machine: Machine,
        *,
        store: Any = None,
        name: str | None = None,
        queue: str | None = None,
        retry_policy: RetryPolicy | None = None,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
        inbox_ttl_s: float | None = DEFAULT_INBOX_TTL_S,
        outbox_topic: str | None = None,
        task_options: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(machine, Machine):
            raise ConfigurationError(
                f"xsm.workflow() needs a Machine from create_machine(...), got "
                f"{type(machine).__name__}"
            )
        self.app = app
        self.machine = machine
        self.name = check_workflow_name(machine.id if name is None else name)
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise ConfigurationError(
                f"retry_policy must be a RetryPolicy, got {type(retry_policy).__name__}"
            )
        if not lock_timeout_s > 0:
            raise ConfigurationError(f"lock_timeout_s must be > 0 seconds, got {lock_timeout_s!r}")
        self.queue = queue
        self.retry_policy = retry_policy or RetryPolicy(max_attempts=5, base_ms=500)
        self.lock_timeout_s = float(lock_timeout_s)
        self.inbox_ttl_s = inbox_ttl_s
        self.outbox_topic = outbox_topic
        self.task = self._register_task(dict(task_options or {}))
        self.context = StepContext(
            app=app,
            name=self.name,
            machine=machine,
            task=self.task,
            queue=queue,
            retry_policy=self.retry_policy,
            lock_timeout_s=self.lock_timeout_s,
            inbox_ttl_s=inbox_ttl_s,
            outbox_topic=outbox_topic,
            store=store,
            invocations={inv.id: node.id for node in machine.nodes for inv in node.invoke},
            dead_letter_sink=buffer_dead_letter,
        )
        with _registry_lock:
            table = _registry.setdefault(app, {})
            if self.name in table:
                raise ConfigurationError(
                    f"app already has a workflow named {self.name!r}; pass name= to tell "
                    "two workflows of one chart apart"
                )
            table[self.name] = self
        register_timer_source(app, f"workflow:{self.name}", partial(recover_overdue, self.context))

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, task={self.task.name!r})"

    def _register_task(self, options: dict[str, Any]) -> Any:
        workflow = self

        def step(task: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return run_step_task(workflow.context, task, args, kwargs)

        step.__name__ = step_function_name(self.name)
        step.__doc__ = f"Run one step of workflow {self.name!r} (xsm_celery)."
        if options.get("max_retries") is not None:
            raise ConfigurationError(
                f"workflow {self.name!r}: task_options max_retries={options['max_retries']!r} "
                "is not used; failing steps follow retry_policy=RetryPolicy(max_attempts=...) "
                "and outages xsm_workflow_outage_max_s"
            )
        # Celery's default cap (3) must never end a step: the policy and the outage bound do.
        options["max_retries"] = None
        options.setdefault("acks_late", True)
        options.setdefault("reject_on_worker_lost", True)
        if self.queue:
            options.setdefault("queue", self.queue)
        return self.app.task(
            name=f"{WORKFLOW_TASK_PREFIX}{self.name}",
            bind=True,
            shared=False,
            typing=False,
            **options,
        )(step)

    def stores(self) -> WorkflowStores:
        """The stores of this workflow in this process (opened on first use)."""
        return self.context.stores()

    def store_key(self, key: str) -> str:
        """The store key of instance ``key`` (``<workflow>:<key>``)."""
        return self.context.store_key(key)

    def user_key(self, store_key: str) -> str:
        """The business key of a store key."""
        return self.context.user_key(store_key)

    def start(self, key: str, *, context: dict[str, Any] | None = None) -> WorkflowView:
        """Create instance ``key`` in this process and return it; an existing one is kept.

        ``context`` is merged into the chart's initial context before the entry actions run.
        """
        message = Message(new_id(), "start", payload=dict(context or {}))
        _check_json(message.payload, "start context")
        run_step(self.context, key, message)
        view = self.get(key)
        assert view is not None
        return view

    def send(
        self,
        key: str,
        event: Any,
        /,
        *,
        event_id: str | None = None,
        queue: str | None = None,
        countdown: float | None = None,
        eta: Any = None,
        **payload: Any,
    ) -> Any:
        """Send ``event`` to instance ``key`` as a Celery task message; return its AsyncResult.

        An unknown key starts a new instance first. ``event_id`` (default: a fresh id) is
        what the inbox deduplicates on: send the same id twice and the step runs once.

        Raises:
            InvalidEventError: an engine event name (``done.invoke.*``, ``after.*``...) or a
                payload JSON cannot carry.
        """
        message = self._event_message(event, payload, event_id)
        options = self._routing(queue)
        if countdown is not None:
            options["countdown"] = countdown
        if eta is not None:
            options["eta"] = eta
        self.store_key(key)
        return self.task.apply_async(args=[key, message.to_dict()], **options)

    def send_now(
        self, key: str, event: Any, /, *, event_id: str | None = None, **payload: Any
    ) -> WorkflowView:
        """Run the step of ``event`` for ``key`` in this process and return the instance.

        Raises:
            WorkflowStepError: an action or guard raised; nothing was saved.
            LockTimeoutError: another step of ``key`` held the lock too long.
        """
        message = self._event_message(event, payload, event_id)
        self.step(key, message)
        view = self.get(key)
        assert view is not None
        return view

    def step(self, key: str, message: Message) -> StepOutcome:
        """Run one step in this process (what the task does, without its retries)."""
        return run_step(self.context, key, message)

    def get(self, key: str) -> WorkflowView | None:
        """The instance ``key`` as stored, or None; reading runs nothing."""
        record = self.stores().snapshots.load(self.store_key(key))
        return None if record is None else view_of(self.name, key, record)

    def keys(self, *, prefix: str = "", limit: int = 1000) -> list[str]:
        """Business keys of the stored instances starting with ``prefix``, sorted."""
        found = self.stores().snapshots.list_keys(prefix=f"{self.name}:{prefix}", limit=limit)
        return [self.user_key(k) for k in found]

    def instances(self, *, prefix: str = "", limit: int = 100) -> list[WorkflowView]:
        """Views of up to ``limit`` stored instances, by key."""
        views = (self.get(key) for key in self.keys(prefix=prefix, limit=limit))
        return [v for v in views if v is not None]

    def accepted_events(self, key: str) -> list[str]:
        """The event types the instance's active states handle (for operators), sorted."""
        view = self.get(key)
        if view is None or view.status != "running":
            return []
        found: set[str] = set()
        for node in self.machine.nodes:
            if view.matches(node.id):
                found.update(t for t in node.on if t and t != "*" and not is_engine_event_type(t))
        return sorted(found)

    def _event_message(self, event: Any, payload: dict[str, Any], event_id: str | None) -> Message:
        made = to_event(event, payload)
        if is_engine_event_type(made.type):
            raise InvalidEventError(
                f"event {made.type!r} is reserved for the engine (done.invoke.*, "
                "error.platform.*, done.state.*, after.*, xstate.*); a workflow's task results "
                "and timers arrive on their own - send a domain event instead"
            )
        _check_json(made.payload, f"payload of {made.type!r}")
        if event_id is not None:
            check_event_id(event_id)
        return Message(event_id or new_id(), "event", type=made.type, payload=dict(made.payload))

    def _routing(self, queue: str | None = None) -> dict[str, Any]:
        return payloads.routing(queue or self.queue)

    def step_plugins(self) -> tuple[Any, ...]:
        """Plugins every step attaches (``StepContext.plugins``)."""
        return self.context.plugins()

    def dispatch_payload(self, dispatch: Dispatch, *, replay_of: str = "") -> dict[str, Any]:
        """The send spec of a task step, with the callbacks that bring its result back."""
        return payloads.dispatch_spec(
            self.context, dispatch, sent_at=time.time(), replay_of=replay_of
        )

    def send_payload(
        self, task_id: str, payload: dict[str, Any], *, countdown: float | None = None
    ) -> None:
        """Publish a send spec as ``fire_due_timers`` would, optionally after ``countdown``."""
        payloads.send_spec(self.app, task_id, payload, countdown=countdown)

    def asyncapi(self, server: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
        """The AsyncAPI 3.0.0 document of this workflow: the Celery task message its queue takes.

        Each event is a message of ``xsm.workflow.<name>(key, message)`` in Celery's task
        protocol 2 (headers and ``[args, kwargs, embed]`` body) on the step task's queue; the
        outbox's publications are CloudEvents. ``options`` are ``asyncapi_document``'s
        (``outbound_topic``, ``title``...). See ``xsm_celery.celery.workflow.asyncapi``.
        """
        from xsm_celery.celery.workflow.asyncapi import workflow_asyncapi

        return workflow_asyncapi(self, server, **options)


def workflow_decorator(
    xsm_app: Any, options: dict[str, Any]
) -> Callable[[Callable[[], Machine]], Workflow]:
    """``@xsm.workflow(store=...)`` over a function that returns the machine."""

    def decorate(build: Callable[[], Machine]) -> Workflow:
        options.setdefault("name", getattr(build, "__name__", None))
        return Workflow(xsm_app, build(), **options)

    return decorate
