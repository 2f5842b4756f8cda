"""Python creators of the built-in actions, for charts written in Python.

Each returns the action as a chart spells it (``{"type": "xstate.assign", "params": ...}``),
so a chart built with them is still plain data and the same chart could be written in JSON
by name. Values may be callables of one mapping ``{"context": ctx, "event": event}``.
The names and signatures are xstate-statemachine 0.11.0's, so its charts move over unchanged.

    from xsm_celery.actions import assign, raise_

    chart = {..., "on": {"ADD": {"actions": [assign({"n": lambda a: a["context"]["n"] + 1}),
                                             raise_("CHANGED", delay=100, send_id="c")]}}}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "ActionEnqueuer",
    "assign",
    "cancel",
    "choose",
    "emit",
    "enqueue_actions",
    "escalate",
    "forward_to",
    "log",
    "pure",
    "raise_",
    "send_parent",
    "send_to",
    "spawn_child",
    "stop_child",
]

EventSpec = str | Mapping[str, Any] | Callable[[Mapping[str, Any]], Any]


def _action(name: str, **params: Any) -> dict[str, Any]:
    return {"type": f"xstate.{name}", "params": {k: v for k, v in params.items() if v is not None}}


def assign(assignment: Mapping[str, Any] | Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
    """Update context: a dict of values (each may be a callable), or a callable returning one."""
    return _action("assign", assignment=assignment)


def raise_(
    event: EventSpec, *, delay: float | str | None = None, send_id: str | None = None
) -> dict[str, Any]:
    """Raise an internal event, processed before any external one; optionally delayed.

    ``delay`` is milliseconds or a named delay of the logic; ``send_id`` lets ``cancel``
    drop a delayed one.
    """
    return _action("raise", event=event, delay=delay, id=send_id)


def send_to(
    target: str | Callable[[Mapping[str, Any]], Any],
    event: EventSpec,
    *,
    delay: float | str | None = None,
    send_id: str | None = None,
) -> dict[str, Any]:
    """Send an event to a child actor by id (a callback actor, a child machine)."""
    return _action("sendTo", to=target, event=event, delay=delay, id=send_id)


def send_parent(
    event: EventSpec, *, delay: float | str | None = None, send_id: str | None = None
) -> dict[str, Any]:
    """Send an event to the machine that invoked or spawned this one."""
    return _action("sendParent", event=event, delay=delay, id=send_id)


def forward_to(target: str | Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
    """Send the event being processed, unchanged, to a child actor by id."""
    return _action("forwardTo", to=target)


def escalate(error: Any) -> dict[str, Any]:
    """Report ``error`` to the parent as this child's failure (its ``onError``).

    ``error`` is an exception, a value (wrapped in ``RuntimeError``), or a callable of
    ``{context, event}`` computing either. The child keeps running, as in XState v4.
    """
    return _action("escalate", error=error)


def emit(event: EventSpec) -> dict[str, Any]:
    """Emit an event to listeners registered with ``interp.on(type, fn)``."""
    return _action("emit", event=event)


def log(
    expr: str | Callable[[Mapping[str, Any]], Any] = "", *, label: str | None = None
) -> dict[str, Any]:
    """Log a message (or a computed one) to the ``xsm_celery.machine`` logger at INFO."""
    return _action("log", expr=expr, label=label)


def cancel(send_id: str) -> dict[str, Any]:
    """Cancel a pending delayed event by the ``send_id`` it was sent with."""
    return _action("cancel", sendId=send_id)


def spawn_child(
    src: str,
    *,
    actor_id: str | None = None,
    system_id: str | None = None,
    input: Any = None,
) -> dict[str, Any]:
    """Start the service or machine ``src`` as a child that lives until ``stop_child``.

    ``system_id`` is accepted for 0.11.0's charts; this engine has no system registry, so
    address the child by ``actor_id``.
    """
    return _action("spawnChild", src=src, id=actor_id, systemId=system_id, input=input)


def stop_child(actor_id: str | Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
    """Stop a spawned (or invoked) child by id."""
    return _action("stopChild", id=actor_id)


def choose(conditions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Run the actions of the first branch whose guard passes (XState v4's ``choose``).

    Each branch is ``{"guard": ..., "actions": ...}``; a branch without a guard always
    passes. A guard is a name of the logic, a ``{type, params}`` guard, a combinator, or a
    callable of ``{context, event}``.
    """
    return _action("choose", conditions=list(conditions))


def pure(fn: Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
    """Run the actions ``fn({context, event})`` returns: one, a list, or None (XState v4)."""
    return _action("pure", get=fn)


def enqueue_actions(fn: Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
    """Run the actions ``fn`` enqueues (XState v5's ``enqueueActions``).

    ``fn`` gets one mapping: ``context``, ``event``, ``enqueue`` (an :class:`ActionEnqueuer`),
    ``check`` (evaluates a guard) and ``self`` (the interpreter). It subsumes ``choose`` and
    ``pure``: branch with ``check`` and enqueue what should run.
    """
    return _action("enqueueActions", callback=fn)


class ActionEnqueuer:
    """The ``enqueue`` an ``enqueue_actions`` callback receives: collects actions in order.

    ``enqueue(action)`` takes an action name, a ``{type, params}`` dict or what a creator
    returns; the methods are shorthands for the creators. One is made per run.
    """

    def __init__(self) -> None:
        #: The actions enqueued so far, in order.
        self.items: list[Any] = []

    def __call__(self, action: str | Mapping[str, Any]) -> None:
        self.items.append(action)

    def assign(self, assignment: Mapping[str, Any] | Callable[[Mapping[str, Any]], Any]) -> None:
        """Enqueue :func:`assign`."""
        self.items.append(assign(assignment))

    def raise_(self, event: EventSpec, **options: Any) -> None:
        """Enqueue :func:`raise_`."""
        self.items.append(raise_(event, **options))

    def send_to(self, target: str, event: EventSpec, **options: Any) -> None:
        """Enqueue :func:`send_to`."""
        self.items.append(send_to(target, event, **options))

    def send_parent(self, event: EventSpec, **options: Any) -> None:
        """Enqueue :func:`send_parent`."""
        self.items.append(send_parent(event, **options))

    def forward_to(self, target: str) -> None:
        """Enqueue :func:`forward_to`."""
        self.items.append(forward_to(target))

    def emit(self, event: EventSpec) -> None:
        """Enqueue :func:`emit`."""
        self.items.append(emit(event))

    def log(self, expr: str | Callable[[Mapping[str, Any]], Any] = "", **options: Any) -> None:
        """Enqueue :func:`log`."""
        self.items.append(log(expr, **options))

    def cancel(self, send_id: str) -> None:
        """Enqueue :func:`cancel`."""
        self.items.append(cancel(send_id))

    def spawn_child(self, src: str, **options: Any) -> None:
        """Enqueue :func:`spawn_child`."""
        self.items.append(spawn_child(src, **options))

    def stop_child(self, actor_id: str) -> None:
        """Enqueue :func:`stop_child`."""
        self.items.append(stop_child(actor_id))
