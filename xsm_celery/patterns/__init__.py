"""Resilience patterns as small statecharts: retry with backoff, dead letters, breakers,
sagas with compensation, and choreography between machines.

Each pattern is a chart plus a little logic, so it runs on the same engine as the user's
own machines, persists with them and renders in the same diagrams. See docs/patterns.md and
docs/sagas.md.
"""

from __future__ import annotations

from xsm_celery.errors import ChoreographyUnsettledError, CircuitOpenError
from xsm_celery.patterns.breaker import CircuitBreaker, CircuitState, circuit_breaker
from xsm_celery.patterns.breaker_chart import CIRCUIT_BREAKER_CONFIG, circuit_breaker_logic
from xsm_celery.patterns.choreography import ChoreographyRouter, Route
from xsm_celery.patterns.dead_letter import (
    DeadLetter,
    DeadLetterReason,
    DeadLetterSink,
    DeadLetterStore,
    DeadLetterStoreProtocol,
    MemoryDeadLetterStore,
)
from xsm_celery.patterns.dead_letter_plugin import DEAD_LETTER_TAG, DeadLetterPlugin
from xsm_celery.patterns.error_chain import ERRORS_CONTEXT_KEY, error_entry
from xsm_celery.patterns.jitter import Jitter
from xsm_celery.patterns.retry import RetryPolicy
from xsm_celery.patterns.saga import SagaBuilder, SagaStep

__all__ = [
    # Retry
    "Jitter",
    "RetryPolicy",
    # Dead letters
    "DEAD_LETTER_TAG",
    "DeadLetter",
    "DeadLetterPlugin",
    "DeadLetterReason",
    "DeadLetterSink",
    "DeadLetterStore",
    "DeadLetterStoreProtocol",
    "ERRORS_CONTEXT_KEY",
    "MemoryDeadLetterStore",
    "error_entry",
    # Circuit breaker
    "CIRCUIT_BREAKER_CONFIG",
    "CircuitBreaker",
    "CircuitOpenError",
    "CircuitState",
    "circuit_breaker",
    "circuit_breaker_logic",
    # Sagas
    "SagaBuilder",
    "SagaStep",
    # Choreography
    "ChoreographyRouter",
    "ChoreographyUnsettledError",
    "Route",
]
