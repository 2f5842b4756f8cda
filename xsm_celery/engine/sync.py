"""SyncInterpreter: runs a machine on the caller's thread; ``send()`` returns once settled."""

from __future__ import annotations

from typing import Any, Literal, overload

from xsm_celery.engine.clock import Clock
from xsm_celery.engine.events import Event, Receipt, check_payload_depth, to_event
from xsm_celery.engine.machine import Machine
from xsm_celery.engine.runtime import Core

__all__ = ["SyncInterpreter"]


class SyncInterpreter(Core):
    """Run a machine synchronously: each ``send()`` processes its event to completion.

    Timers fire when the clock says so: on ``SimulatedClock.increment()``, or for a
    ``WallClock`` on ``tick()`` and at the start of each ``send()``. Events posted from other
    threads (``send_threadsafe``, callback actors' ``send_back``) run at those same points,
    on the thread that owns the interpreter.

    Args:
        machine: From :func:`create_machine`.
        clock: Defaults to a ``WallClock``.
        input: Passed to a ``context`` callable as ``{"input": input}`` (XState's input).
    """

    def __init__(self, machine: Machine, clock: Clock | None = None, *, input: Any = None) -> None:
        super().__init__(machine, clock, input=input)

    def start(self) -> SyncInterpreter:
        """Enter the initial states and settle them; returns ``self`` for chaining.

        Raises:
            InterpreterStoppedError: the interpreter was stopped or is done.
            RunawayChainError: the initial chain does not settle within
                ``machine.max_iterations``.
        """
        self._begin()
        return self

    @overload
    def send(
        self, event_or_type: Any, /, *, wait: Literal[False] = ..., **payload: Any
    ) -> None: ...

    @overload
    def send(self, event_or_type: Any, /, *, wait: Literal[True], **payload: Any) -> Receipt: ...

    def send(self, event_or_type: Any, /, *, wait: bool = False, **payload: Any) -> Receipt | None:
        """Process an event: ``send("E", **kw)``, ``send(Event(...))`` or ``send({"type": ...})``.

        Returns None, or with ``wait=True`` a :class:`Receipt` of the outcome. An event sent
        from inside a step (an action) is queued and runs once the step has settled. Events
        to a machine that is not running, and engine event names (``done.invoke.*`` ...),
        are dropped with a warning.

        Raises:
            InvalidEventError: ``event_or_type`` is not an event, or its payload is nested
                deeper than ``MAX_EVENT_DEPTH``.
            RunawayChainError: the event's chain (eventless transitions, raised events,
                events actions send) does not settle within ``machine.max_iterations``.
        """
        if type(event_or_type) is str and event_or_type:
            if payload:
                check_payload_depth(event_or_type, payload)
            event = Event(event_or_type, payload)
        else:
            event = to_event(event_or_type, payload)
        return self._send(event, wait)

    def send_events(self, events: Any) -> None:
        """Send each event of an iterable in order (each is processed to completion)."""
        for event in events:
            self.send(event)

    def stop(self) -> None:
        """Stop: cancel timers, run actor cleanups, refuse further events. Idempotent."""
        self._halt()
