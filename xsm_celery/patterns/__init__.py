"""Resilience patterns: retry with backoff, dead letters, breakers, sagas, choreography,
limiters and the rest.

Retry, dead letters, the breaker and sagas are charts plus a little logic, so they run on the
same engine as the user's own machines, persist with them and render in the same diagrams.
The rate limiters, bulkheads, timeouts, fallback, pipeline and idempotency are plain standard
library code usable with or without Celery; their shared state sits behind the Protocols of
``limit_protocols`` and ``idempotency``. See docs/patterns.md and docs/sagas.md.
"""

from __future__ import annotations

from xsm_celery.errors import (
    BulkheadRejectedError,
    ChoreographyUnsettledError,
    CircuitOpenError,
    DeadlineExceededError,
    IdempotencyInProgressError,
    RateLimitExceededError,
    RetryExhaustedError,
)
from xsm_celery.patterns.aimd import AIMDBulkhead, AIMDConfig
from xsm_celery.patterns.breaker import CircuitBreaker, CircuitState, circuit_breaker
from xsm_celery.patterns.breaker_backend import MemoryBreakerStateBackend, breaker_from_settings
from xsm_celery.patterns.breaker_chart import CIRCUIT_BREAKER_CONFIG, circuit_breaker_logic
from xsm_celery.patterns.bulkhead import Bulkhead, BulkheadConfig, BulkheadStats, bulkhead
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
from xsm_celery.patterns.limit_memory import MemoryConcurrencyBackend, MemoryRateLimitBackend
from xsm_celery.patterns.limit_protocols import (
    Admission,
    BreakerDecision,
    BreakerSettings,
    BreakerStateBackend,
    BreakerStatus,
    ConcurrencyBackend,
    OutagePolicy,
    RateAlgorithm,
    RateLimitBackend,
    RateSpec,
)
from xsm_celery.patterns.pipeline import DEFAULT_ORDER, STAGES, ResiliencePipeline
from xsm_celery.patterns.rate_limit import LimiterStats, RateLimiter, TokenBucket, rate_limited
from xsm_celery.patterns.registry import (
    PRESETS,
    BreakerConfig,
    CircuitBreakerRegistry,
    parse_breaker_settings,
)
from xsm_celery.patterns.retry import ErrorPredicate, ResultPredicate, RetryPolicy
from xsm_celery.patterns.retry_call import acall_with_retry, call_with_retry, retry
from xsm_celery.patterns.saga import SagaBuilder, SagaStep
from xsm_celery.patterns.sliding_window import SlidingWindow, SlidingWindowLimiter
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
