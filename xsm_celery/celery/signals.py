"""Celery signals for resilience events: breakers opening and closing, retries giving up.

Connect to them like Celery's own signals::

    from xsm_celery.celery.signals import circuit_opened

    @circuit_opened.connect
    def page(sender, event, **kwargs):   # sender: the breaker's name
        alert(f"{sender} opened: {event.reason}")

They are fed from the fact stream (``xsm_celery.hooks``) through
``xsm_celery.patterns.events``, so the core never imports Celery. The bridge subscribes
only when the first receiver connects: until then the patterns pay nothing for signals.
Each signal is sent with ``sender`` = the breaker or call name and ``event`` = the
``ResilienceEvent`` record. A receiver that raises is logged by Celery and skipped
(``send`` isolates receivers), so a failing alert never breaks the call that tripped it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.utils.dispatch import Signal

from xsm_celery.hooks import Fact, subscribe, subscribers
from xsm_celery.patterns.events import (
    EVENT_KINDS,
    CircuitClosedEvent,
    CircuitHalfOpenedEvent,
    CircuitOpenedEvent,
    ResilienceEvent,
    RetryAttemptedEvent,
    RetryExhaustedEvent,
    event_from_fact,
)

__all__ = [
    "circuit_closed",
    "circuit_half_opened",
    "circuit_opened",
    "install_signals",
    "retry_attempted",
    "retry_exhausted",
]

_log = logging.getLogger(__name__)


class _FactSignal(Signal):
    """A Celery ``Signal`` that starts the fact bridge when its first receiver connects."""

    def connect(self, *args: Any, **kwargs: Any) -> Any:
        install_signals()
        return super().connect(*args, **kwargs)


#: A breaker opened. ``sender``: its name; ``event``: a ``CircuitOpenedEvent``.
circuit_opened = _FactSignal(name="xsm_circuit_opened")
#: A breaker half-opened after its cooldown. ``event``: a ``CircuitHalfOpenedEvent``.
circuit_half_opened = _FactSignal(name="xsm_circuit_half_opened")
#: A breaker closed (probes succeeded or a reset). ``event``: a ``CircuitClosedEvent``.
circuit_closed = _FactSignal(name="xsm_circuit_closed")
#: An in-process retry scheduled another attempt. ``event``: a ``RetryAttemptedEvent``.
retry_attempted = _FactSignal(name="xsm_retry_attempted")
#: A retry loop or a chart task gave up. ``event``: a ``RetryExhaustedEvent``.
retry_exhausted = _FactSignal(name="xsm_retry_exhausted")

_SIGNALS: dict[type[ResilienceEvent], Signal] = {
    CircuitOpenedEvent: circuit_opened,
    CircuitHalfOpenedEvent: circuit_half_opened,
    CircuitClosedEvent: circuit_closed,
    RetryAttemptedEvent: retry_attempted,
    RetryExhaustedEvent: retry_exhausted,
}

_lock = threading.Lock()


def _sender(event: ResilienceEvent) -> str:
    return str(getattr(event, "breaker", None) or getattr(event, "call", ""))


def _relay(fact: Fact) -> None:
    """The hooks subscriber: send the signal matching the fact, if any."""
    if fact.kind not in EVENT_KINDS:
        return
    event = event_from_fact(fact)
    if event is None:
        return
    signal = _SIGNALS[type(event)]
    for receiver, error in signal.send_robust(sender=_sender(event), event=event):
        if isinstance(error, Exception):
            _log.warning("xsm_celery signal receiver %r failed: %r", receiver, error)


def install_signals() -> None:
    """Start sending the signals; idempotent, and done for you by every ``connect``.

    It checks the live subscriber list rather than a flag, so a test suite (or an
    application) that cleared the fact stream's subscribers gets the bridge back with its
    next ``connect``.
    """
    with _lock:
        if _relay not in subscribers():
            subscribe(_relay, EVENT_KINDS)
