"""Child machines: a ``Machine`` given as a service runs as a child actor of its parent.

The child is an interpreter of the parent's kind (sync or async) on the parent's clock, with
its own context (from its chart, or its ``context`` callable given the invoke's ``input``),
the global plugins and none of the parent's. It talks back with ``sendParent``; the parent
talks to it with ``sendTo`` / ``send_to(id, ...)``. When it reaches a top-level final state
the parent gets ``done.invoke.<id>`` with the child's ``output``; when it fails (its start
or a step raises) the parent gets ``error.platform.<id>`` and the child is stopped. It is
stopped when the invoking state exits (a spawned child: on ``stopChild`` or when the parent
stops or finishes), and it travels inside the parent's snapshot.

A child's snapshot is taken and restored by the same functions as its parent's, which
:mod:`~xsm_celery.engine.snapshot` passes in (``snapshot_of``, ``restore``): the snapshot
module calls this one for the children it holds, so importing it back would be a cycle.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.chart import InvokeDef
from xsm_celery.engine.events import EngineEvent, Event
from xsm_celery.engine.invoke import forget_actor, track_actor
from xsm_celery.engine.machine import Machine
from xsm_celery.engine.plugins import dispatch
from xsm_celery.engine.state import RUNNING
from xsm_celery.errors import SnapshotCorruptError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import StateNode
    from xsm_celery.engine.clock import Clock
    from xsm_celery.engine.invoke import ActorRef
    from xsm_celery.engine.runtime import Core

__all__ = ["child_driver", "child_failed", "restore_children", "saved_children", "start_child"]

logger = logging.getLogger("xsm_celery.engine")

#: ``snapshot.snapshot_dict``: one interpreter's snapshot as a dict.
SnapshotOf = Callable[["Core"], dict[str, Any]]
#: ``snapshot.restore``: set up a blank interpreter from a snapshot.
Restore = Callable[["Core", Any, Machine, "Clock | None"], None]


#: Driver class to its child class (see :func:`child_driver`).
_CHILD_DRIVERS: dict[type[Core], type[Core]] = {}


def child_driver(driver: type[Core]) -> type[Core]:
    """The class a child of a ``driver`` interpreter runs as: ``driver``, failing to its parent.

    A child's step can start in many places: the parent's ``sendTo``, the child's own timer
    on the clock, an event a callback actor posts, an async service finishing on the event
    loop. Only the first has the parent on the stack; in the others an exception would escape
    into ``SimulatedClock.increment()`` or the loop's exception handler and the parent would
    never hear of it. The child class catches it where every step runs (``_run``) and makes it
    the child's failure: the child is stopped and the parent gets ``error.platform.<id>``, as
    XState delivers an actor's error to its parent. For the same reason a child's run is never
    cut into slices that the async driver continues later (``_yield_every``): every run ends
    inside ``_run``, and a run started by the parent's ``sendTo`` has settled when the parent's
    step goes on, as on the sync engine. It keeps the driver's name, so ``repr()`` and
    ``isinstance`` read as before.
    """
    if driver.__dict__.get("_runs_as_child"):
        return driver
    made = _CHILD_DRIVERS.get(driver)
    if made is None:
        base_run = driver._run
        base_setup = driver._setup

        def _setup(self: Core, machine: Machine, clock: Clock | None, context: Any) -> None:
            base_setup(self, machine, clock, context)
            self._yield_every = 0

        def _run(self: Core, event: Event, body: Any = None) -> Any:
            try:
                return base_run(self, event, body)
            except Exception as exc:
                if not _step_failed(self, exc):
                    raise
                return self._result

        made = type(
            driver.__name__,
            (driver,),
            {
                "_run": _run,
                "_setup": _setup,
                "_runs_as_child": True,
                "__module__": driver.__module__,
                "__qualname__": driver.__qualname__,
                "__doc__": driver.__doc__,
            },
        )
        _CHILD_DRIVERS[driver] = made
    return made


def start_child(core: Core, inv: InvokeDef, node: StateNode, machine: Machine, input: Any) -> None:
    """Create, register and start a child interpreter for ``inv``, owned by ``node``."""
    child = child_driver(type(core))(machine, clock=core.clock, input=input)
    _adopt(core, child, inv)
    actor = _attach(core, child, inv, node)
    try:
        child._begin()
    except Exception as exc:
        _fail(core, actor, exc)


def _adopt(core: Core, child: Core, inv: InvokeDef) -> None:
    child.parent = core
    child._actor_id = inv.id
    child._invoked_as = inv


def _attach(core: Core, child: Core, inv: InvokeDef, node: StateNode) -> ActorRef:
    """The actor that stands for ``child``: events sent to it run the child's step."""
    actor = track_actor(core, inv, node)
    actor.child = child
    actor.cleanup = child._halt
    actor.deliver = functools.partial(_deliver_to_child, core, actor)
    return actor


def child_finished(child: Core) -> None:
    """Called by a child reaching its final state: the parent gets ``done.invoke.<id>``."""
    parent = child.parent
    inv = child._invoked_as
    if parent is None or inv is None:
        return
    actor = parent.children.get(inv.id)
    if actor is None or actor.child is not child or actor.stopped:
        return
    for node, actors in list(parent._actors.items()):
        if actor in actors:
            forget_actor(parent, node, actor)
    actor.stopped = True
    if parent._plugins:
        dispatch(parent, parent._plugins, "on_service_done", (inv, child.output))
    parent._post_internal(EngineEvent(inv.done_type, child.output, inv.id))


def _step_failed(child: Core, exc: Exception) -> bool:
    """A child's step raised: fail it to its parent; False if it is no longer a running child.

    A child that is done, stopped or already forgotten re-raises: the error then belongs to
    whoever is on the stack (a parent step that the child's ``done.invoke`` started, say).
    """
    parent = child.parent
    inv = child._invoked_as
    if parent is None or inv is None or child._status != RUNNING:
        return False
    actor = parent.children.get(inv.id)
    if actor is None or actor.child is not child or actor.stopped:
        return False
    _fail(parent, actor, exc)
    return True


def _fail(parent: Core, actor: ActorRef, exc: BaseException) -> None:
    """Forget and stop a failed child, then tell its parent."""
    for node, actors in list(parent._actors.items()):
        if actor in actors:
            forget_actor(parent, node, actor)
    actor.stop()
    child_failed(parent, actor.definition, exc)


def child_failed(core: Core, inv: InvokeDef, exc: BaseException) -> None:
    """A child that raised: the parent gets ``error.platform.<id>`` (queued or run now)."""
    logger.warning(
        "machine %r: child %r failed with %s: %s", core.id, inv.id, type(exc).__name__, exc
    )
    if core._plugins:
        dispatch(core, core._plugins, "on_service_error", (inv, exc))
    core._post_internal(EngineEvent(inv.error_type, exc, inv.id))


def _deliver_to_child(parent: Core, actor: ActorRef, event: Event) -> None:
    """Send an event into a child machine; a child whose step raises has failed."""
    child = actor.child
    assert child is not None
    try:
        child._send(event, False)
    except Exception as exc:
        _fail(parent, actor, exc)


def saved_children(core: Core, snapshot_of: SnapshotOf) -> dict[str, Any]:
    """The child machines of ``core`` for its snapshot: owner state, src and the child's own."""
    saved: dict[str, Any] = {}
    for node, actors in core._actors.items():
        for actor in actors:
            child = actor.child
            if child is None or actor.stopped:
                continue
            inv = actor.definition
            saved[inv.id] = {
                "src": inv.src,
                "owner": node.id,
                "spawned": inv not in node.invoke,
                "snapshot": snapshot_of(child),
            }
    return saved


def restore_children(core: Core, saved: Any, restore: Restore) -> None:
    """Re-create the child machines a snapshot holds, each restored from its own snapshot.

    Raises:
        SnapshotCorruptError: a child entry is malformed, its src is not a machine of the
            logic, or its owner state is not active.
    """
    if not isinstance(saved, dict):
        raise SnapshotCorruptError("snapshot field 'children' must be an object")
    for actor_id, item in saved.items():
        if not isinstance(item, dict) or not isinstance(item.get("snapshot"), dict):
            raise SnapshotCorruptError(f"snapshot child {actor_id!r} is malformed")
        src = item.get("src")
        machine = core.machine.logic.services.get(src) if isinstance(src, str) else None
        owner = core.machine.find_state(str(item.get("owner")))
        if not isinstance(machine, Machine):
            raise SnapshotCorruptError(
                f"snapshot child {actor_id!r} runs {src!r}, which the logic does not give as a "
                "machine"
            )
        if owner is None or (owner is not core.machine.root and owner not in core._config):
            raise SnapshotCorruptError(f"snapshot child {actor_id!r} belongs to no active state")
        inv = next((i for i in owner.invoke if i.id == actor_id), None)
        if inv is None:
            inv = InvokeDef(core.machine.root, str(src), actor_id, "spawnChild")
            inv.impl = machine
        driver = child_driver(type(core))
        child = driver.__new__(driver)
        restore(child, item["snapshot"], machine, core.clock)
        _adopt(core, child, inv)
        _attach(core, child, inv, owner)
