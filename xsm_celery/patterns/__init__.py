"""Resilience patterns: retry with backoff, dead letters, breakers, sagas, choreography,
limiters and the rest.

Retry, dead letters, the breaker and sagas are charts plus a little logic, so they run on the
same engine as the user's own machines, persist with them and render in the same diagrams.
The rate limiters, bulkheads, timeouts, fallback, pipeline and idempotency are plain standard
library code usable with or without Celery; their shared state sits behind the Protocols of
``limits.protocols`` and ``idempotency``. See docs/patterns.md and docs/sagas.md.
"""

from __future__ import annotations

import typing

from xsm_celery.errors import (
    BulkheadRejectedError,
    ChoreographyUnsettledError,
    CircuitOpenError,
    DeadlineExceededError,
    IdempotencyInProgressError,
    RateLimitExceededError,
    RetryExhaustedError,
)
from xsm_celery.patterns.breaker import (
    CIRCUIT_BREAKER_CONFIG,
    PRESETS,
    BreakerConfig,
    CircuitBreaker,
    CircuitBreakerRegistry,
    CircuitState,
    MemoryBreakerStateBackend,
    breaker_from_settings,
    circuit_breaker,
    circuit_breaker_logic,
    parse_breaker_settings,
)
from xsm_celery.patterns.dead_letter import (
    DEAD_LETTER_TAG,
    DeadLetter,
    DeadLetterPlugin,
    DeadLetterReason,
    DeadLetterSink,
    DeadLetterStore,
    DeadLetterStoreProtocol,
    MemoryDeadLetterStore,
)
from xsm_celery.patterns.error_chain import ERRORS_CONTEXT_KEY, error_entry
from xsm_celery.patterns.events import (
    EVENT_KINDS,
    CircuitClosedEvent,
    CircuitClosedHook,
    CircuitHalfOpenedEvent,
    CircuitOpenedEvent,
    CircuitOpenedHook,
    ResilienceEvent,
    RetryAttemptedEvent,
    RetryAttemptedHook,
    RetryExhaustedEvent,
    event_from_fact,
    on_event,
)
from xsm_celery.patterns.fallback import Fallback
from xsm_celery.patterns.idempotency import (
    Claim,
    IdempotencyStore,
    MemoryIdempotencyStore,
    default_key,
    idempotent,
)
from xsm_celery.patterns.jitter import Jitter
from xsm_celery.patterns.limits import (
    Admission,
    AIMDBulkhead,
    AIMDConfig,
    AimdParams,
    BreakerDecision,
    BreakerSettings,
    BreakerStateBackend,
    BreakerStatus,
    Bulkhead,
    BulkheadConfig,
    BulkheadStats,
    ConcurrencyBackend,
    LimiterStats,
    MemoryConcurrencyBackend,
    MemoryRateLimitBackend,
    OutagePolicy,
    RateAlgorithm,
    RateLimitBackend,
    RateLimiter,
    RateSpec,
    SlidingWindow,
    SlidingWindowLimiter,
    TokenBucket,
    bulkhead,
    rate_limited,
)
from xsm_celery.patterns.pipeline import DEFAULT_ORDER, STAGES, ResiliencePipeline
from xsm_celery.patterns.retry import ErrorPredicate, ResultPredicate, RetryPolicy
from xsm_celery.patterns.retry_call import acall_with_retry, call_with_retry, retry
from xsm_celery.patterns.saga import SagaBuilder, SagaStep
from xsm_celery.patterns.timeout import (
    Deadline,
    TimeoutManager,
    acall_with_timeout,
    call_with_timeout,
    current_deadline,
    deadline,
    with_timeout,
)

__all__ = [
    # Retry
    "Jitter",
    "ErrorPredicate",
    "ResultPredicate",
    "RetryExhaustedError",
    "RetryPolicy",
    "acall_with_retry",
    "call_with_retry",
    "retry",
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
    # Limit backends
    "Admission",
    "BreakerDecision",
    "BreakerSettings",
    "BreakerStateBackend",
    "BreakerStatus",
    "ConcurrencyBackend",
    "OutagePolicy",
    "RateAlgorithm",
    "RateLimitBackend",
    "RateSpec",
    "MemoryBreakerStateBackend",
    "MemoryConcurrencyBackend",
    "MemoryRateLimitBackend",
    "breaker_from_settings",
    # Rate limits
    "LimiterStats",
    "RateLimiter",
    "SlidingWindow",
    "SlidingWindowLimiter",
    "TokenBucket",
    "rate_limited",
    # Bulkheads
    "AIMDBulkhead",
    "AIMDConfig",
    "AimdParams",
    "Bulkhead",
    "BulkheadConfig",
    "BulkheadRejectedError",
    "BulkheadStats",
    "bulkhead",
    # Timeouts
    "Deadline",
    "DeadlineExceededError",
    "TimeoutManager",
    "acall_with_timeout",
    "call_with_timeout",
    "current_deadline",
    "deadline",
    "with_timeout",
    # Fallback and composition
    "DEFAULT_ORDER",
    "Fallback",
    "RateLimitExceededError",
    "ResiliencePipeline",
    "STAGES",
    # Idempotency
    "Claim",
    "IdempotencyInProgressError",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "default_key",
    "idempotent",
    # Registry and events
    "BreakerConfig",
    "CircuitBreakerRegistry",
    "PRESETS",
    "parse_breaker_settings",
    "EVENT_KINDS",
    "CircuitClosedEvent",
    "CircuitClosedHook",
    "CircuitHalfOpenedEvent",
    "CircuitOpenedEvent",
    "CircuitOpenedHook",
    "ResilienceEvent",
    "RetryAttemptedEvent",
    "RetryAttemptedHook",
    "RetryExhaustedEvent",
    "event_from_fact",
    "on_event",
]

if typing.TYPE_CHECKING:
    from xsm_celery.eda.choreography import ChoreographyRouter, Route


def __getattr__(name: str) -> object:
    """``ChoreographyRouter`` and ``Route``, from :mod:`xsm_celery.eda.choreography`.

    The router is an ``InboundDispatcher`` over routes, so it lives in ``eda``; seed 003
    imports it from here. It is resolved on first use because ``eda`` imports the dead-letter
    modules of this package: importing ``eda`` while this package initialises would find it
    half-built.
    """
    if name in ("ChoreographyRouter", "Route"):
        from xsm_celery.eda import choreography

        return getattr(choreography, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
