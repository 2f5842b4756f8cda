"""Resilience events: typed records of breaker transitions and retry outcomes.

The patterns report through the fact stream (``xsm_celery.hooks``); this module turns
those facts into small frozen records an application can subscribe to by type::

    stop = on_event(CircuitOpenedEvent, lambda event: page_oncall(event.breaker))

The Celery signals of ``xsm_celery.celery.signals`` are fed from the same records. The
specification's hook payload names (``CircuitOpenedHook``, ``CircuitClosedHook``,
``RetryAttemptedHook``) are the same classes as the events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from xsm_celery.hooks import Fact, FactKind, subscribe

__all__ = [
    "CircuitClosedEvent",
    "CircuitClosedHook",
    "CircuitHalfOpenedEvent",
    "CircuitOpenedEvent",
    "CircuitOpenedHook",
    "EVENT_KINDS",
    "ResilienceEvent",
    "RetryAttemptedEvent",
    "RetryAttemptedHook",
    "RetryExhaustedEvent",
    "event_from_fact",
    "on_event",
]

E = TypeVar("E", bound="ResilienceEvent")


@dataclass(frozen=True, slots=True)
class ResilienceEvent:
    """Base of every resilience event; ``at`` is the wall time it was observed (epoch s)."""

    at: float = field(default_factory=time.time, kw_only=True)


@dataclass(frozen=True, slots=True)
class CircuitOpenedEvent(ResilienceEvent):
    """A breaker opened: calls are refused until its cooldown ends."""

    breaker: str
    previous_state: str
    reason: str


@dataclass(frozen=True, slots=True)
class CircuitHalfOpenedEvent(ResilienceEvent):
    """A breaker's cooldown ended: probe calls are admitted."""

    breaker: str
    previous_state: str
    reason: str


@dataclass(frozen=True, slots=True)
class CircuitClosedEvent(ResilienceEvent):
    """A breaker closed: the probes succeeded, or an operator reset it."""

    breaker: str
    previous_state: str
    reason: str


@dataclass(frozen=True, slots=True)
class RetryAttemptedEvent(ResilienceEvent):
    """An attempt failed and another is scheduled (``outcome``: exception type or ``result``)."""

    call: str
    attempt: int
    outcome: str


@dataclass(frozen=True, slots=True)
class RetryExhaustedEvent(ResilienceEvent):
    """A retry loop gave up: ``reason`` is ``exhausted``, ``result``, ``deadline`` or the task's."""

    call: str
    attempts: int
    reason: str


#: The specification's hook payload names, the same classes as the events.
CircuitOpenedHook = CircuitOpenedEvent
CircuitClosedHook = CircuitClosedEvent
RetryAttemptedHook = RetryAttemptedEvent

_TRANSITIONS: dict[str, type[CircuitOpenedEvent | CircuitHalfOpenedEvent | CircuitClosedEvent]] = {
    "open": CircuitOpenedEvent,
    "half_open": CircuitHalfOpenedEvent,
    "closed": CircuitClosedEvent,
}

#: The fact kinds that become events; anything else is skipped after one lookup.
EVENT_KINDS = frozenset(
    {
        FactKind.BREAKER_TRANSITION,
        FactKind.RETRY_ATTEMPTED,
        FactKind.RETRY_EXHAUSTED,
        FactKind.GAVE_UP,
    }
)


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return 0


def event_from_fact(fact: Fact) -> ResilienceEvent | None:
    """The event a fact describes, or None for facts that are not resilience events.

    A chart task giving up (``GAVE_UP``) is a ``RetryExhaustedEvent`` for its task.
    """
    if fact.kind not in EVENT_KINDS:
        return None
    data = fact.fields
    if fact.kind is FactKind.BREAKER_TRANSITION:
        kind = _TRANSITIONS.get(str(data.get("to_state")))
        if kind is None:
            return None
        return kind(
            breaker=str(data.get("breaker", "")),
            previous_state=str(data.get("from_state", "")),
            reason=str(data.get("reason", "")),
        )
    if fact.kind is FactKind.RETRY_ATTEMPTED:
        return RetryAttemptedEvent(
            call=str(data.get("call", "")),
            attempt=_int(data.get("attempt")),
            outcome=str(data.get("outcome", "")),
        )
    # A chart task's GAVE_UP names its task and the chart's ``attempt`` counter.
    return RetryExhaustedEvent(
        call=str(data.get("call", data.get("task", ""))),
        attempts=_int(data.get("attempts", data.get("attempt"))),
        reason=str(data.get("reason", "gave_up")),
    )


def on_event(kind: type[E], callback: Callable[[E], None]) -> Callable[[], None]:
    """Call ``callback`` with every event of type ``kind``; returns the unsubscribe function.

    A callback that raises is logged and skipped by the fact stream, never re-raised into
    the breaker or retry loop that emitted the fact.
    """

    def receive(fact: Fact) -> None:
        if fact.kind not in EVENT_KINDS:
            return
        event = event_from_fact(fact)
        if isinstance(event, kind):
            callback(event)

    return subscribe(receive)
