"""Invocations: services a state runs while it is active, and callback actors.

A service is ``fn(interp, ctx, event)``; its return value is ``onDone``'s ``event.data`` and
its exception ``onError``'s. A callback actor (:func:`from_callback`) lives exactly as long as
its state: it talks back through ``send_back``, listens through ``receive``, and its cleanup
runs once when the state exits or the interpreter stops, whatever the reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.events import Event, to_event
from xsm_celery.errors import ArgumentTypeError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import InvokeDef, StateNode
    from xsm_celery.engine.runtime import Core

__all__ = ["ActorRef", "CallbackLogic", "forget_actor", "from_callback", "track_actor"]

logger = logging.getLogger("xsm_celery.engine")

SendBack = Callable[..., None]
Receive = Callable[[Callable[[Event], Any]], None]


class CallbackLogic:
    """A callback actor's setup function, marked so the engine runs it as an actor.

    Calling it calls the setup directly, which is handy in unit tests of the setup.
    """

    __slots__ = ("setup",)

    def __init__(self, setup: Callable[[SendBack, Receive, Any, Event], Any]) -> None:
        if not callable(setup):
            raise ArgumentTypeError(f"from_callback() needs a callable, got {type(setup).__name__}")
        self.setup = setup

    def __call__(self, send_back: SendBack, receive: Receive, ctx: Any, event: Event) -> Any:
        return self.setup(send_back, receive, ctx, event)

    def __repr__(self) -> str:
        return f"from_callback({getattr(self.setup, '__name__', self.setup)!r})"


def from_callback(setup: Callable[[SendBack, Receive, Any, Event], Any]) -> CallbackLogic:
    """Make ``setup(send_back, receive, ctx, event)`` an actor logic for ``MachineLogic``.

    ``setup`` runs when the invoking state is entered and may return a cleanup callable.
    ``send_back("EVENT", **payload)`` posts to the machine from any thread (through
    ``send_threadsafe``, so a sync interpreter handles it at its next ``send()``, ``tick()`` or
    clock increment); ``receive(handler)`` subscribes to events sent to the actor with
    ``interp.send_to(actor_id, ...)``. An exception from ``setup`` goes to ``onError``.
    """
    return CallbackLogic(setup)


class ActorRef:
    """A running invocation: a callback actor, an async service's task or a child machine.

    ``stop()`` runs the cleanup exactly once, however many times and from wherever it is
    called; events it sends back after that are dropped.
    """

    __slots__ = (
        "_lock",
        "child",
        "cleanup",
        "definition",
        "deliver",
        "interp",
        "receivers",
        "stopped",
        "task",
    )

    def __init__(self, interp: Any, definition: InvokeDef) -> None:
        self.interp = interp
        self.definition = definition
        self.cleanup: Callable[[], Any] | None = None
        self.receivers: list[Callable[[Event], Any]] = []
        self.stopped = False
        self.task: Any = None
        #: The child interpreter when the service is a machine, else None.
        self.child: Any = None
        #: Where ``send`` hands events when the actor is a child machine (set by
        #: :mod:`~xsm_celery.engine.children`, which owns what a failing child means).
        self.deliver: Callable[[Event], None] | None = None
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        """The invocation id (``invoke.id``, or the state's id by default)."""
        return self.definition.id

    def send_back(self, event_or_type: Any, /, **payload: Any) -> None:
        """Post an event to the parent machine; dropped once the actor has stopped."""
        if self.stopped:
            logger.debug("actor %s stopped; dropped %r", self.id, event_or_type)
            return
        self.interp.send_threadsafe(event_or_type, **payload)

    def receive(self, handler: Callable[[Event], Any]) -> None:
        """Subscribe ``handler`` to events sent to this actor."""
        self.receivers.append(handler)

    def send(self, event_or_type: Any, /, **payload: Any) -> None:
        """Deliver an event to the actor's ``receive`` handlers; a raising handler is logged."""
        if self.stopped:
            return
        event = to_event(event_or_type, payload)
        if self.deliver is not None:
            self.deliver(event)
            return
        for handler in list(self.receivers):
            try:
                handler(event)
            except Exception:
                logger.exception("actor %s: receive handler raised on %s", self.id, event.type)

    def stop(self) -> None:
        """Stop the actor: cancel its task and run its cleanup, once."""
        with self._lock:
            if self.stopped:
                return
            self.stopped = True
            cleanup, self.cleanup = self.cleanup, None
        if self.task is not None:
            self.task.cancel()
        if cleanup is None:
            return
        try:
            cleanup()
        except Exception:
            logger.exception("actor %s: cleanup raised; contained", self.id)

    def __repr__(self) -> str:
        return f"ActorRef(id={self.id!r}, stopped={self.stopped})"


def track_actor(core: Core, inv: InvokeDef, node: StateNode) -> ActorRef:
    """A new actor of ``inv``, owned by ``node`` (stopped when it exits) and listed by id."""
    actor = ActorRef(core, inv)
    core._actors.setdefault(node, []).append(actor)
    core.children[inv.id] = actor
    return actor


def forget_actor(core: Core, node: StateNode, actor: ActorRef) -> None:
    """Drop an actor that finished by itself from its state's list and ``children``."""
    actors = core._actors.get(node)
    if actors is not None and actor in actors:
        actors.remove(actor)
        if not actors:
            del core._actors[node]
    if core.children.get(actor.id) is actor:
        del core.children[actor.id]
