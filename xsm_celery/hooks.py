"""One stream of facts the package emits, for metrics, traces, Celery events and logs.

The core and the integrations report what happened (a retry was scheduled, a dead letter was
written, a timer fired late, a breaker opened) by calling :func:`emit` with a :class:`FactKind`
and a few fields. Exporters subscribe with :func:`subscribe`, to every kind or to the few they
handle; the core never imports one. With no subscriber for a kind, ``emit`` returns after one
dict lookup, and :func:`wants` lets a hot path skip building the fields at all.

A subscriber that raises is logged and skipped: observing the work must never break it.

Fields are plain values with bounded cardinality where an exporter may turn them into labels
(task names, exception type names, reasons, outcomes), never task arguments or context values.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from xsm_celery.errors import ConfigurationError

__all__ = [
    "Fact",
    "FactKind",
    "Subscriber",
    "emit",
    "subscribe",
    "subscribers",
    "unsubscribe",
    "wants",
]

_log = logging.getLogger(__name__)


class FactKind(enum.Enum):
    """What a fact reports. Its value is the stable name exporters and log pipelines use."""

    ATTEMPT_STARTED = "attempt_started"
    ATTEMPT_FINISHED = "attempt_finished"
    RETRY_SCHEDULED = "retry_scheduled"
    GAVE_UP = "gave_up"
    DEAD_LETTER_WRITTEN = "dead_letter_written"
    DEAD_LETTER_REPLAYED = "dead_letter_replayed"
    HEADER_REJECTED = "header_rejected"
    TIMER_SCHEDULED = "timer_scheduled"
    TIMER_FIRED = "timer_fired"
    OUTBOX_RELAYED = "outbox_relayed"
    #: The broker refused an outbox row ``max_attempts`` times; it is set aside as failed
    #: (fields topic, seq, envelope_id, attempts, error_type) and later rows go on.
    OUTBOX_ROW_FAILED = "outbox_row_failed"
    DISPATCH_OUTCOME = "dispatch_outcome"
    WORKFLOW_STEP = "workflow_step"
    WORKFLOW_STEP_FAILED = "workflow_step_failed"
    WORKFLOW_TRANSITION = "workflow_transition"
    STALE_COMPLETION = "stale_completion"
    BREAKER_TRANSITION = "breaker_transition"
    LIMIT_ADMITTED = "limit_admitted"
    LIMIT_DEFERRED = "limit_deferred"
    BACKEND_UNAVAILABLE = "backend_unavailable"
    #: A saga step's outcome; fields saga, step and outcome (completed, failed, timed_out,
    #: compensated, compensation_failed).
    SAGA_STEP = "saga_step"
    LIMIT_REJECTED = "limit_rejected"
    BULKHEAD_ADJUSTED = "bulkhead_adjusted"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    FALLBACK_USED = "fallback_used"
    RETRY_ATTEMPTED = "retry_attempted"
    RETRY_EXHAUSTED = "retry_exhausted"
    IDEMPOTENT_REPLAYED = "idempotent_replayed"
    #: A message is about to leave this process; ``carrier`` is its dict of string headers
    #: (or envelope extensions), the one field a subscriber may write to: a tracer adds
    #: the W3C ``traceparent`` of the current span, so the receiver continues the trace.
    OUTBOUND = "outbound"
    #: A store refused a value (too long, over the snapshot cap): counted, dead-lettered.
    STORE_REFUSED = "store_refused"
    #: The dead-letter store was down at give-up; the record waits in the local spool.
    DEAD_LETTER_SPOOLED = "dead_letter_spooled"


@dataclass(frozen=True, slots=True)
class Fact:
    """One thing that happened, with the fields that describe it."""

    #: What happened.
    kind: FactKind
    #: Its details; read-only, so one subscriber cannot change what the next one sees.
    fields: Mapping[str, object] = field(default_factory=dict)


#: A subscriber receives every fact emitted after it subscribed.
Subscriber = Callable[[Fact], None]

_subscribers: tuple[Subscriber, ...] = ()
#: The kinds each subscriber asked for (None: every kind), in subscription order.
_entries: tuple[tuple[Subscriber, frozenset[FactKind] | None], ...] = ()
#: Each kind somebody wants -> its subscribers in order; a kind nobody wants is absent.
_routes: dict[FactKind, tuple[Subscriber, ...]] = {}
_lock = threading.Lock()


def subscribe(
    subscriber: Subscriber, kinds: Iterable[FactKind] | None = None
) -> Callable[[], None]:
    """Start sending facts to ``subscriber``; returns a function that stops it again.

    With ``kinds`` it receives only those kinds, and the others cost it nothing: a process
    whose only subscribers log a few kinds pays no field-building for the rest.
    """
    wanted = None if kinds is None else frozenset(_kind(kind) for kind in kinds)
    global _entries
    with _lock:
        _entries = (*_entries, (subscriber, wanted))
        _rebuild()
    return lambda: unsubscribe(subscriber)


def _kind(kind: object) -> FactKind:
    try:
        return FactKind(kind)
    except ValueError:
        raise ConfigurationError(
            f"{kind!r} is not a fact kind; subscribe to members of xsm_celery.hooks.FactKind "
            f"(one of {', '.join(k.value for k in FactKind)})"
        ) from None


def unsubscribe(subscriber: Subscriber) -> None:
    """Stop sending facts to ``subscriber``; unknown subscribers are ignored."""
    global _entries
    with _lock:
        _entries = tuple(entry for entry in _entries if entry[0] is not subscriber)
        _rebuild()


def _rebuild() -> None:
    """Recompute the routes after a change; readers see the old or the new, never a mix."""
    global _subscribers, _routes
    routes: dict[FactKind, tuple[Subscriber, ...]] = {}
    for kind in FactKind:
        chosen = tuple(s for s, wanted in _entries if wanted is None or kind in wanted)
        if chosen:
            routes[kind] = chosen
    _subscribers = tuple(s for s, _wanted in _entries)
    _routes = routes


def subscribers() -> tuple[Subscriber, ...]:
    """The current subscribers, in the order they subscribed."""
    return _subscribers


def wants(kind: FactKind) -> bool:
    """Whether any subscriber receives ``kind``: a hot path asks before building a fact."""
    return kind in _routes


def emit(kind: FactKind, **fields: object) -> None:
    """Report one fact to its subscribers; costs one dict lookup when there is none."""
    current = _routes.get(kind)
    if not current:
        return
    fact = Fact(kind, MappingProxyType(fields))
    for subscriber in current:
        try:
            subscriber(fact)
        except Exception:
            _log.exception("xsm_celery hook subscriber %r failed on %s", subscriber, kind.value)
