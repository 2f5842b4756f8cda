"""Starting and stopping the invocations of active states.

Invocations start once the step that entered their state has settled (so a state left by an
``always`` in the same step never starts its service). A sync service's result or exception
becomes a ``done.invoke`` / ``error.platform`` engine event on the interpreter's internal
queue; a callback actor or an async task lives until its state exits.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.chart import InvokeDef
from xsm_celery.engine.children import start_child
from xsm_celery.engine.events import EngineEvent, Event
from xsm_celery.engine.invoke import ActorRef, CallbackLogic, forget_actor, track_actor
from xsm_celery.engine.machine import Machine
from xsm_celery.engine.plugins import dispatch
from xsm_celery.errors import ConfigurationError, ImplementationMissingError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import StateNode
    from xsm_celery.engine.runtime import Core

__all__ = [
    "service_done",
    "service_failed",
    "spawn",
    "start_invocation",
    "stop_child",
    "start_pending_invokes",
    "stop_actors",
    "stop_all_actors",
]

logger = logging.getLogger("xsm_celery.engine")

#: Services that run as actors rather than as a call: a child machine, a callback actor.
_ACTOR_LOGIC = (Machine, CallbackLogic)


def start_pending_invokes(core: Core) -> None:
    """Start the invocations of states entered during the step that are still active."""
    pending, core._pending_invokes = core._pending_invokes, []
    seen: set[StateNode] = set()
    for node in pending:
        if node in seen or node not in core._config or node in core._actors:
            continue
        seen.add(node)
        for inv in node.invoke:
            start_invocation(core, inv, node)


def spawn(core: Core, src: str, actor_id: str | None, input: Any, path: str) -> ActorRef | None:
    """``spawnChild``: start the service ``src`` as an actor owned by the machine, not a state.

    It lives until ``stopChild``, ``stop()`` or the machine finishing; its results arrive as
    ``done.invoke.<id>`` / ``error.platform.<id>`` like an invocation's.

    Raises:
        ImplementationMissingError: the logic has no service ``src``.
        ValueError: an actor with that id is already running.
    """
    impl = core.machine.logic.services.get(src)
    if impl is None:
        raise ImplementationMissingError("service", src, path=path)
    root = core.machine.root
    if actor_id is None:
        actor_id = f"{src}:{next(core._timer_seq)}"
    if actor_id in core.children:
        raise ConfigurationError(f"spawnChild: an actor with id {actor_id!r} is already running")
    inv = InvokeDef(root, src, str(actor_id), path)
    inv.impl = impl
    inv.input = input
    start_invocation(core, inv, root)
    return core.children.get(inv.id)


def stop_child(core: Core, actor_id: str) -> bool:
    """``stopChild``: stop a running child actor by id; whether there was one."""
    actor = core.children.get(actor_id)
    if actor is None:
        logger.warning("machine %r: stopChild(%r): no such running child", core.id, actor_id)
        return False
    for node, actors in list(core._actors.items()):
        if actor in actors:
            forget_actor(core, node, actor)
    core.children.pop(actor_id, None)
    actor.stop()
    return True


def start_invocation(core: Core, inv: InvokeDef, node: StateNode) -> None:
    """Start one invocation (or spawned child) owned by ``node``."""
    impl = inv.impl
    given = inv.input
    if given is not None and callable(given):
        given = given(_args(core))
    event = Event(f"invoke.{inv.id}", {"input": {} if given is None else given})
    if core._plugins:
        dispatch(core, core._plugins, "on_service_start", (inv,))
    if impl is None:
        service_failed(core, inv, ImplementationMissingError("service", inv.src, path=inv.path))
        return
    if isinstance(impl, _ACTOR_LOGIC):  # one test keeps a plain function's path short
        if isinstance(impl, Machine):
            start_child(core, inv, node, impl, given)
        else:
            _start_actor(core, inv, node, impl, event)
        return
    try:
        result = impl(core, core._context, event)
    except Exception as exc:
        service_failed(core, inv, exc)
        return
    if inspect.isawaitable(result):
        core._start_awaitable(inv, node, result)
        return
    service_done(core, inv, result)


def _args(core: Core) -> dict[str, Any]:
    return {"context": core._context, "event": None}


def service_done(core: Core, inv: InvokeDef, result: Any) -> EngineEvent:
    """Report a service's result; returns (and queues) its ``done.invoke`` event."""
    if core._plugins:
        dispatch(core, core._plugins, "on_service_done", (inv, result))
    event = EngineEvent(inv.done_type, result, inv.id)
    core._internal.append(event)
    return event


def service_failed(core: Core, inv: InvokeDef, exc: BaseException) -> EngineEvent:
    """Report a service's failure; returns (and queues) its ``error.platform`` event."""
    if not inv.on_error:
        logger.warning(
            "machine %r: service %r failed with %s: %s and has no onError",
            core.machine.id,
            inv.src,
            type(exc).__name__,
            exc,
        )
    if core._plugins:
        dispatch(core, core._plugins, "on_service_error", (inv, exc))
    event = EngineEvent(inv.error_type, exc, inv.id)
    core._internal.append(event)
    return event


def _start_actor(
    core: Core, inv: InvokeDef, node: StateNode, logic: CallbackLogic, event: Event
) -> None:
    actor = track_actor(core, inv, node)
    try:
        cleanup = logic.setup(actor.send_back, actor.receive, core._context, event)
    except Exception as exc:
        forget_actor(core, node, actor)
        actor.stop()
        service_failed(core, inv, exc)
        return
    if callable(cleanup):
        actor.cleanup = cleanup


def stop_actors(core: Core, node: StateNode) -> None:
    """Stop the actors a state owns (it exits)."""
    for actor in core._actors.pop(node, ()):
        if core.children.get(actor.id) is actor:
            del core.children[actor.id]
        actor.stop()


def stop_all_actors(core: Core) -> None:
    """Stop every actor, deepest state first (stop, or the machine is done)."""
    for node in sorted(core._actors, key=lambda n: n.order, reverse=True):
        stop_actors(core, node)
