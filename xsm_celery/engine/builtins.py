"""Built-in actions: ``assign``, ``raise``, ``sendTo``, ``sendParent``, ``emit``, ``log``,
``cancel``, ``spawnChild`` and ``stopChild``, usable by name in a chart.

A chart names them like any action (``{"type": "assign", "params": {...}}``, also spelled
``xstate.assign``); a name the chart's logic defines itself stays the logic's. Each built-in
is an ordinary action callable ``(interp, ctx, event, action)``, so a failing one is contained
like any action (logged, ``on_action_error``, ``last_error``) and the rest of its list is
skipped. Values that may be computed (an ``assign`` value, an event, a ``log`` message, a
target) may be callables of one mapping ``{"context": ctx, "event": event}``, as in XState.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.events import ENGINE_EVENT_PREFIXES, Event
from xsm_celery.engine.timers import Timer, cancel_delayed, push_timer
from xsm_celery.errors import ArgumentTypeError, ConfigurationError, InvalidConfigError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import ActionDef
    from xsm_celery.engine.runtime import Core

__all__ = [
    "BUILTIN_ALIASES",
    "BUILTIN_PARAMS",
    "builtin_action",
    "canonical_builtin",
    "check_params",
    "resolve_event",
]

logger = logging.getLogger("xsm_celery.engine")
machine_log = logging.getLogger("xsm_celery.machine")

#: Every accepted spelling of a built-in, to its canonical name.
BUILTIN_ALIASES: dict[str, str] = {
    **{
        name: name
        for name in (
            "assign",
            "raise",
            "sendTo",
            "sendParent",
            "emit",
            "log",
            "cancel",
            "spawnChild",
            "stopChild",
        )
    },
    **{
        f"xstate.{name}": name
        for name in (
            "assign",
            "raise",
            "sendTo",
            "sendParent",
            "emit",
            "log",
            "cancel",
            "spawnChild",
            "stopChild",
        )
    },
    "send_to": "sendTo",
    "send_parent": "sendParent",
    "spawn_child": "spawnChild",
    "stop_child": "stopChild",
}

#: Canonical built-in -> (required params, optional params).
BUILTIN_PARAMS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "assign": (frozenset({"assignment"}), frozenset()),
    "raise": (frozenset({"event"}), frozenset({"delay", "id"})),
    "sendTo": (frozenset({"to", "event"}), frozenset({"delay", "id"})),
    "sendParent": (frozenset({"event"}), frozenset({"delay", "id"})),
    "emit": (frozenset({"event"}), frozenset()),
    "log": (frozenset(), frozenset({"expr", "label"})),
    "cancel": (frozenset({"sendId"}), frozenset()),
    "spawnChild": (frozenset({"src"}), frozenset({"id", "input", "systemId"})),
    "stopChild": (frozenset({"id"}), frozenset()),
}


def canonical_builtin(action_type: str) -> str | None:
    """The canonical built-in an action name spells, or None."""
    return BUILTIN_ALIASES.get(action_type)


def check_params(canonical: str, params: Any, path: str) -> None:
    """Refuse a built-in whose params lack a required key or carry an unknown one.

    Raises:
        InvalidConfigError: naming the action's path and the expected keys.
    """
    required, optional = BUILTIN_PARAMS[canonical]
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise InvalidConfigError(
            f"built-in {canonical!r} takes a params object, got {params!r:.60}", path=path
        )
    missing = sorted(k for k in required if params.get(k) is None)
    unknown = sorted(k for k in params if k not in required | optional)
    if missing or unknown:
        raise InvalidConfigError(
            f"built-in {canonical!r} needs params {sorted(required)} (optional "
            f"{sorted(optional)}); missing {missing}, unknown {unknown}",
            path=path,
        )
    event = params.get("event")
    if isinstance(event, str) and event.startswith(ENGINE_EVENT_PREFIXES):
        raise InvalidConfigError(
            f"built-in {canonical!r} cannot send the engine event name {event!r}", path=path
        )


def _args(ctx: Any, event: Event) -> dict[str, Any]:
    return {"context": ctx, "event": event}


def _value(spec: Any, ctx: Any, event: Event) -> Any:
    return spec(_args(ctx, event)) if callable(spec) else spec


def resolve_event(spec: Any, ctx: Any, event: Event) -> Event:
    """An event from a built-in's ``event`` param: a type, a ``{type, ...}`` dict, or Event."""
    spec = _value(spec, ctx, event)
    if isinstance(spec, Event):
        return Event(spec.type, dict(spec.payload))
    if isinstance(spec, str) and spec:
        return Event(spec)
    if isinstance(spec, Mapping) and isinstance(spec.get("type"), str) and spec["type"]:
        payload = {k: v for k, v in spec.items() if k != "type"}
        return Event(spec["type"], payload)
    raise ConfigurationError(
        f"a built-in's event must be a type or a {{'type': ...}} dict, got {spec!r}"
    )


def _delay_ms(core: Core, spec: Any, ctx: Any, event: Event) -> float | None:
    if spec is None:
        return None
    if isinstance(spec, str) and not spec.lstrip("-").replace(".", "", 1).isdigit():
        impl = core.machine.logic.delays.get(spec)
        if impl is None:
            raise ConfigurationError(f"unknown delay {spec!r}; add it to MachineLogic(delays=...)")
        spec = impl(ctx, event) if callable(impl) else impl
    else:
        spec = _value(spec, ctx, event)
    delay = float(spec)
    if not math.isfinite(delay) or delay < 0:
        raise ConfigurationError(f"a delay must be finite milliseconds >= 0, got {spec!r}")
    return delay


def _assign(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    assignment = action.params["assignment"]
    if callable(assignment):
        produced = assignment(_args(ctx, event))
        if produced is not None:
            if not isinstance(produced, Mapping):
                raise ArgumentTypeError(
                    f"an assign function must return a dict, got {produced!r:.60}"
                )
            ctx.update(produced)
        return
    if not isinstance(assignment, Mapping):
        raise ArgumentTypeError(f"assign takes a dict or a function, got {assignment!r:.60}")
    for key, value in assignment.items():
        ctx[key] = _value(value, ctx, event)


def _raise(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    params = action.params
    raised = resolve_event(params["event"], ctx, event)
    _refuse_engine_name(raised)
    delay = _delay_ms(core, params.get("delay"), ctx, event)
    if delay is None:
        core._internal.append(raised)
        return
    _schedule(core, raised, delay, params.get("id"), None)


def _send_to(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    params = action.params
    target = _value(params["to"], ctx, event)
    target_id = getattr(target, "id", target)
    if not isinstance(target_id, str):
        raise ConfigurationError(f"sendTo needs an actor id, got {target!r:.60}")
    sent = resolve_event(params["event"], ctx, event)
    delay = _delay_ms(core, params.get("delay"), ctx, event)
    if delay is None:
        core.send_to(target_id, sent)
        return
    _schedule(core, sent, delay, params.get("id"), target_id)


def _send_parent(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    parent = core.parent
    if parent is None:
        logger.warning(
            "machine %r: sendParent with no parent (not a child machine); ignored", core.id
        )
        return
    params = action.params
    sent = resolve_event(params["event"], ctx, event)
    _refuse_engine_name(sent)
    delay = _delay_ms(core, params.get("delay"), ctx, event)
    if delay is None:
        parent._send(sent, False)
        return
    _schedule(core, sent, delay, params.get("id"), "#_parent")


def _emit(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    core._emit(resolve_event(action.params["event"], ctx, event))


def _log(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    params = action.params or {}
    message = _value(params.get("expr", ""), ctx, event)
    label = params.get("label")
    text = f"{label}: {message}" if label else str(message)
    machine_log.info("[%s] %s", core.id, text)


def _cancel(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    send_id = _value(action.params["sendId"], ctx, event)
    if not cancel_delayed(core, str(send_id)):
        logger.debug("machine %r: cancel(%r) found no pending delayed event", core.id, send_id)


def _spawn_child(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    params = action.params
    core._spawn(
        str(params["src"]),
        params.get("id"),
        _value(params.get("input"), ctx, event),
        action.path,
    )


def _stop_child(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    target = _value(action.params["id"], ctx, event)
    core._stop_child(str(getattr(target, "id", target)))


def _refuse_engine_name(event: Event) -> None:
    if event.type.startswith(ENGINE_EVENT_PREFIXES):
        raise ConfigurationError(f"event {event.type!r} uses a name reserved for engine events")


def _schedule(core: Core, event: Event, delay: float, send_id: Any, target: str | None) -> None:
    timer = Timer(
        core.clock.now() + delay,
        core.machine.root,
        None,
        delay,
        event=event,
        send_id=None if send_id is None else str(send_id),
        target=target,
    )
    push_timer(core, timer)


_IMPLS: dict[str, Callable[[Core, Any, Event, ActionDef], None]] = {
    "assign": _assign,
    "raise": _raise,
    "sendTo": _send_to,
    "sendParent": _send_parent,
    "emit": _emit,
    "log": _log,
    "cancel": _cancel,
    "spawnChild": _spawn_child,
    "stopChild": _stop_child,
}


def builtin_action(canonical: str) -> Callable[[Core, Any, Event, ActionDef], None]:
    """The implementation of a canonical built-in."""
    return _IMPLS[canonical]
