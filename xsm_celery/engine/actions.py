"""Python creators of the built-in actions, for charts written in Python.

Each returns the action as a chart spells it (``{"type": "xstate.assign", "params": ...}``),
so a chart built with them is still plain data and the same chart could be written in JSON
by name. Values may be callables of one mapping ``{"context": ctx, "event": event}``.

    from xsm_celery.actions import assign, raise_

    chart = {..., "on": {"ADD": {"actions": [assign({"n": lambda a: a["context"]["n"] + 1}),
                                             raise_("CHANGED", delay=100, send_id="c")]}}}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "assign",
    "cancel",
    "emit",
    "log",
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
    to: str | Callable[[Mapping[str, Any]], Any],
    event: EventSpec,
    *,
    delay: float | str | None = None,
    send_id: str | None = None,
) -> dict[str, Any]:
    """Send an event to a child actor by id (a callback actor, a child machine)."""
    return _action("sendTo", to=to, event=event, delay=delay, id=send_id)


def send_parent(
    event: EventSpec, *, delay: float | str | None = None, send_id: str | None = None
) -> dict[str, Any]:
    """Send an event to the machine that invoked or spawned this one."""
    return _action("sendParent", event=event, delay=delay, id=send_id)


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


def spawn_child(src: str, *, actor_id: str | None = None, input: Any = None) -> dict[str, Any]:
    """Start the service or machine ``src`` as a child that lives until ``stop_child``."""
    return _action("spawnChild", src=src, id=actor_id, input=input)


def stop_child(actor_id: str | Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
    """Stop a spawned (or invoked) child by id."""
    return _action("stopChild", id=actor_id)
