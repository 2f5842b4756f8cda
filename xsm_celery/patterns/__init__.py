"""Resilience patterns as small statecharts: retry with backoff, dead letters, breakers.

Each pattern is a chart plus a little logic, so it runs on the same engine as the user's
own machines, persists with them and renders in the same diagrams. See docs/patterns.md.
"""

from __future__ import annotations

from xsm_celery.errors import BulkheadRejectedError, CircuitOpenError
from xsm_celery.patterns.aimd import AIMDBulkhead, AIMDConfig
from xsm_celery.patterns.breaker import CircuitBreaker, CircuitState, circuit_breaker
from xsm_celery.patterns.breaker_backend import MemoryBreakerStateBackend, breaker_from_settings
from xsm_celery.patterns.breaker_chart import CIRCUIT_BREAKER_CONFIG, circuit_breaker_logic
from xsm_celery.patterns.bulkhead import Bulkhead, BulkheadConfig, BulkheadStats, bulkhead
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
from xsm_celery.patterns.limit_memory import MemoryConcurrencyBackend, MemoryRateLimitBackend
from xsm_celery.patterns.limit_protocols import (
    Admission,
    BreakerDecision,
    BreakerSettings,
    BreakerStateBackend,
    BreakerStatus,
    ConcurrencyBackend,
    RateAlgorithm,
    RateLimitBackend,
    RateSpec,
)
from xsm_celery.patterns.rate_limit import LimiterStats, RateLimiter, TokenBucket
from xsm_celery.patterns.retry import RetryPolicy
from xsm_celery.patterns.sliding_window import SlidingWindow, SlidingWindowLimiter

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
    # Limit backends
    "Admission",
    "BreakerDecision",
    "BreakerSettings",
    "BreakerStateBackend",
    "BreakerStatus",
    "ConcurrencyBackend",
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
    # Bulkheads
    "AIMDBulkhead",
    "AIMDConfig",
    "Bulkhead",
    "BulkheadConfig",
    "BulkheadRejectedError",
    "BulkheadStats",
    "bulkhead",
]
