"""Built-in actions: ``assign``, ``raise``, ``sendTo``, ``sendParent``, ``forwardTo``,
``escalate``, ``emit``, ``log``, ``cancel``, ``spawnChild``, ``stopChild``, and the composite
``choose``, ``pure`` and ``enqueueActions``, usable by name in a chart.

A chart names them like any action (``{"type": "assign", "params": {...}}``, also spelled
``xstate.assign``); a name the chart's logic defines itself stays the logic's. Each built-in
is an ordinary action callable ``(interp, ctx, event, action)``, so a failing one is contained
like any action (logged, ``on_action_error``, ``last_error``) and the rest of its list is
skipped. Values that may be computed (an ``assign`` value, an event, a ``log`` message, a
target) may be callables of one mapping ``{"context": ctx, "event": event}``, as in XState.

A composite built-in computes further actions (a ``choose`` branch, what a ``pure`` or
``enqueueActions`` callback returns) and runs them in place, in order, each seeing the
context the previous one left. The expansion is a loop, not a recursion: a callback that
keeps enqueueing composites ends in :class:`RunawayChainError` at the machine's chain limit,
contained like any failing action. :func:`expand` is the step the pure transition functions
(:mod:`xsm_celery.engine.pure_step`) share with the interpreter.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.actions import ActionEnqueuer
from xsm_celery.engine.chart import ActionDef, GuardDef
from xsm_celery.engine.events import ENGINE_EVENT_PREFIXES, EngineEvent, Event
from xsm_celery.engine.logic import accepts_params
from xsm_celery.engine.plugins import dispatch
from xsm_celery.engine.selection import evaluate_guard
from xsm_celery.engine.timers import Timer, cancel_delayed, push_timer
from xsm_celery.errors import (
    ArgumentTypeError,
    ConfigurationError,
    ImplementationMissingError,
    InvalidConfigError,
    RunawayChainError,
)

if TYPE_CHECKING:
    from xsm_celery.engine.runtime import Core

__all__ = [
    "BUILTIN_ALIASES",
    "BUILTIN_PARAMS",
    "COMPOSITES",
    "builtin_action",
    "canonical_builtin",
    "check_guard",
    "check_params",
    "expand",
    "is_composite",
    "resolve_action",
    "resolve_event",
]

logger = logging.getLogger("xsm_celery.engine")
machine_log = logging.getLogger("xsm_celery.machine")

_NAMES = (
    "assign",
    "raise",
    "sendTo",
    "sendParent",
    "forwardTo",
    "escalate",
    "emit",
    "log",
    "cancel",
    "spawnChild",
    "stopChild",
    "choose",
    "pure",
    "enqueueActions",
)

#: Every accepted spelling of a built-in, to its canonical name.
BUILTIN_ALIASES: dict[str, str] = {
    **{name: name for name in _NAMES},
    **{f"xstate.{name}": name for name in _NAMES},
    "send_to": "sendTo",
    "send_parent": "sendParent",
    "forward_to": "forwardTo",
    "spawn_child": "spawnChild",
    "stop_child": "stopChild",
    "enqueue_actions": "enqueueActions",
}

#: Canonical built-in -> (required params, optional params).
BUILTIN_PARAMS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "assign": (frozenset({"assignment"}), frozenset()),
    "raise": (frozenset({"event"}), frozenset({"delay", "id"})),
    "sendTo": (frozenset({"to", "event"}), frozenset({"delay", "id"})),
    "sendParent": (frozenset({"event"}), frozenset({"delay", "id"})),
    "forwardTo": (frozenset({"to"}), frozenset()),
    "escalate": (frozenset({"error"}), frozenset()),
    "emit": (frozenset({"event"}), frozenset()),
    "log": (frozenset(), frozenset({"expr", "label"})),
    "cancel": (frozenset({"sendId"}), frozenset()),
    "spawnChild": (frozenset({"src"}), frozenset({"id", "input", "systemId"})),
    "stopChild": (frozenset({"id"}), frozenset()),
    # XState v4 exports spell choose's branches `conds`; one of the two is checked below.
    "choose": (frozenset(), frozenset({"conditions", "conds"})),
    "pure": (frozenset({"get"}), frozenset()),
    "enqueueActions": (frozenset({"callback"}), frozenset()),
}

#: The built-ins that compute further actions instead of doing something themselves.
COMPOSITES = frozenset({"choose", "pure", "enqueueActions"})


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
    if canonical == "choose":
        _check_branches(params, path)
    elif canonical in COMPOSITES:
        key = "get" if canonical == "pure" else "callback"
        fn = params[key]
        if not callable(fn) and not (isinstance(fn, str) and fn):
            raise InvalidConfigError(
                f"built-in {canonical!r} needs {key!r}: a function, or in a JSON chart the "
                f"name of one in MachineLogic(actions=...), got {fn!r:.60}",
                path=path,
            )


def _check_branches(params: Mapping[str, Any], path: str) -> None:
    """A ``choose`` has one list of ``{guard, actions}`` branches; nested built-ins are checked."""
    key = "conditions" if "conditions" in params else "conds"
    branches = params.get(key)
    if not isinstance(branches, list) or ("conditions" in params and "conds" in params):
        raise InvalidConfigError(
            "built-in 'choose' needs one list of branches under 'conditions' (XState v4: "
            "'conds'), each {'guard': ..., 'actions': [...]}",
            path=path,
        )
    for index, branch in enumerate(branches):
        bpath = f"{path}.params.{key}[{index}]"
        if not isinstance(branch, Mapping) or set(branch) - {"guard", "cond", "actions"}:
            raise InvalidConfigError(
                f"a 'choose' branch is {{'guard': ..., 'actions': [...]}}, got {branch!r:.80}",
                path=bpath,
            )
        items = branch.get("actions") or []
        for position, item in enumerate(items if isinstance(items, list) else [items]):
            ipath = f"{bpath}.actions[{position}]"
            if isinstance(item, Mapping):
                nested = canonical_builtin(str(item.get("type")))
                if nested is not None:
                    check_params(nested, _params_of(item), ipath)
            elif not (isinstance(item, str) and item):
                raise InvalidConfigError(
                    f"an action is a name or a {{'type', 'params'}} dict, got {item!r:.60}",
                    path=ipath,
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


def _forward_to(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    target = _value(action.params["to"], ctx, event)
    target_id = getattr(target, "id", target)
    if not isinstance(target_id, str):
        raise ConfigurationError(f"forwardTo needs an actor id, got {target!r:.60}")
    core.send_to(target_id, Event(event.type, dict(event.payload)))


def _escalate(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    parent = core.parent
    invoked_as = core._invoked_as
    error = _value(action.params["error"], ctx, event)
    if not isinstance(error, BaseException):
        error = RuntimeError(str(error))
    if parent is None or invoked_as is None:
        logger.warning(
            "machine %r: escalate with no parent (not a child machine); ignored: %s", core.id, error
        )
        return
    parent._post_internal(EngineEvent(invoked_as.error_type, error, invoked_as.id))


def _params_of(item: Mapping[str, Any]) -> Any:
    """An action dict's params: under ``params``, or written flat for a built-in (XState v4)."""
    params = item.get("params")
    if params is None and canonical_builtin(str(item.get("type"))) is not None:
        params = {k: v for k, v in item.items() if k != "type"} or None
    return params


def resolve_action(core: Core, spec: Any, path: str) -> ActionDef:
    """An action computed at run time (a branch's, an enqueued one), bound to its implementation.

    Raises:
        ConfigurationError: ``spec`` is not an action name, dict or ActionDef.
        InvalidConfigError: a built-in with missing or unknown params.
        ImplementationMissingError: a name neither the logic nor the built-ins define.
    """
    if isinstance(spec, ActionDef):
        if spec.fn is not None:
            return spec
        action_type, params = spec.type, spec.params
    elif isinstance(spec, str) and spec:
        action_type, params = spec, None
    elif isinstance(spec, Mapping) and isinstance(spec.get("type"), str) and spec["type"]:
        action_type, params = spec["type"], _params_of(spec)
    else:
        raise ConfigurationError(
            f"an action is a name or a {{'type': ..., 'params': ...}} dict, got {spec!r:.60}"
        )
    fn = core.machine.logic.actions.get(action_type)
    if fn is None:
        canonical = canonical_builtin(action_type)
        if canonical is None:
            raise ImplementationMissingError("action", action_type, path=path)
        check_params(canonical, params, path)
        fn = _IMPLS[canonical]
    return ActionDef(action_type, params, fn, path)


def check_guard(core: Core, ctx: Any, event: Event, spec: Any, path: str) -> bool:
    """Evaluate a guard given at run time: a name, ``{type, params}``, a combinator, ``stateIn``
    or a callable of ``{context, event}``. A named guard that raises is False (reported).

    Raises:
        ImplementationMissingError: a guard name the logic lacks.
        ConfigurationError: ``spec`` is not a guard.
    """
    if spec is None:
        return True
    if callable(spec):
        return bool(spec(_args(ctx, event)))
    if isinstance(spec, str) and spec:
        return _named_guard(core, ctx, event, spec, params=None, path=path)
    if not isinstance(spec, Mapping) or not isinstance(spec.get("type"), str):
        raise ConfigurationError(f"a guard is a name or a {{'type': ...}} dict, got {spec!r:.60}")
    kind = spec["type"].removeprefix("xstate.")
    params = spec.get("params")
    options = params if isinstance(params, Mapping) else {}
    if kind in ("and", "or"):
        operands = spec.get("guards", options.get("guards")) or []
        results = (check_guard(core, ctx, event, g, path) for g in operands)
        return all(results) if kind == "and" else any(results)
    if kind == "not":
        return not check_guard(core, ctx, event, spec.get("guard", options.get("guard")), path)
    if kind == "stateIn":
        ref = spec.get("state", options.get("state", options.get("id", params)))
        state = core.machine.find_state(ref) if isinstance(ref, str) else None
        return state is not None and state in core._config
    return _named_guard(core, ctx, event, spec["type"], params=params, path=path)


def _named_guard(core: Core, ctx: Any, event: Event, name: str, *, params: Any, path: str) -> bool:
    fn = core.machine.logic.guards.get(name)
    if fn is None:
        raise ImplementationMissingError("guard", name, path=path)
    guard = GuardDef(name, params, fn, path, params is not None and accepts_params(fn))
    return evaluate_guard(guard, ctx, event, core)


def _callback(core: Core, action: ActionDef, key: str) -> Callable[..., Any]:
    fn = action.params[key]
    if isinstance(fn, str):
        named = core.machine.logic.actions.get(fn)
        if named is None:
            raise ImplementationMissingError("action", fn, path=action.path)
        return named
    return fn  # type: ignore[no-any-return]


def expand(core: Core, ctx: Any, event: Event, action: ActionDef) -> list[ActionDef]:
    """The actions a composite built-in stands for right now, bound and in order."""
    canonical = canonical_builtin(action.type)
    params = action.params
    path = action.path
    produced: Any
    if canonical == "choose":
        key = "conditions" if "conditions" in params else "conds"
        produced = []
        for index, branch in enumerate(params[key]):
            guard = branch.get("guard", branch.get("cond"))
            if check_guard(core, ctx, event, guard, f"{path}.params.{key}[{index}].guard"):
                produced = branch.get("actions") or []
                path = f"{path}.params.{key}[{index}].actions"
                break
    elif canonical == "pure":
        produced = _callback(core, action, "get")(_args(ctx, event))
        path = f"{path}.params.get()"
    else:
        enqueue = ActionEnqueuer()

        def check(guard: Any) -> bool:
            return check_guard(core, ctx, event, guard, f"{action.path}.check()")

        _callback(core, action, "callback")(
            {"context": ctx, "event": event, "enqueue": enqueue, "check": check, "self": core}
        )
        produced = enqueue.items
        path = f"{path}.params.callback()"
    if produced is None:
        return []
    items = produced if isinstance(produced, (list, tuple)) else [produced]
    return [resolve_action(core, item, f"{path}[{i}]") for i, item in enumerate(items)]


def is_composite(action: ActionDef) -> bool:
    """Whether ``action`` is bound to a composite built-in (not a logic action of that name)."""
    return action.fn is _run_composite


def _run_composite(core: Core, ctx: Any, event: Event, action: ActionDef) -> None:
    """Run what a composite stands for, in place; nested composites are expanded in a loop."""
    pending = deque(expand(core, ctx, event, action))
    limit = core.machine.chain_limit
    expanded = 1
    plugins = core._plugins
    while pending:
        item = pending.popleft()
        if item.fn is _run_composite:
            expanded += 1
            if expanded > limit:
                raise RunawayChainError(
                    f"machine {core.id!r}: action {action.type!r} expanded more than {limit} "
                    "composite actions; a pure or enqueueActions callback keeps producing itself",
                    limit=limit,
                )
            pending.extendleft(reversed(expand(core, ctx, event, item)))
            continue
        if plugins:
            dispatch(core, plugins, "on_action_execute", (item,))
        outcome = item.fn(core, ctx, event, item)  # type: ignore[misc]
        if outcome is not None and inspect.isawaitable(outcome):
            core._start_async_action(item, outcome, event)


_IMPLS: dict[str, Callable[[Core, Any, Event, ActionDef], None]] = {
    "assign": _assign,
    "raise": _raise,
    "sendTo": _send_to,
    "sendParent": _send_parent,
    "forwardTo": _forward_to,
    "escalate": _escalate,
    "emit": _emit,
    "log": _log,
    "cancel": _cancel,
    "spawnChild": _spawn_child,
    "stopChild": _stop_child,
    "choose": _run_composite,
    "pure": _run_composite,
    "enqueueActions": _run_composite,
}


def builtin_action(canonical: str) -> Callable[[Core, Any, Event, ActionDef], None]:
    """The implementation of a canonical built-in."""
    return _IMPLS[canonical]
