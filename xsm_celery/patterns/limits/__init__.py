"""Limits on how much work runs: rate limiters, bulkheads and their adaptive (AIMD) form.

``protocols`` holds the Protocols and records a shared backend implements (the fleet's
Redis backends too); ``memory`` the in-process backends; ``rate_limit`` and
``sliding_window`` the two rate algorithms; ``bulkhead`` the concurrency limit and
``aimd`` the bulkhead whose limit adapts, with ``AimdParams``, the record every AIMD pool
in the package shares.
"""

from __future__ import annotations

from xsm_celery.patterns.limits.aimd import AIMDBulkhead, AIMDConfig, AimdParams
from xsm_celery.patterns.limits.bulkhead import Bulkhead, BulkheadConfig, BulkheadStats, bulkhead
from xsm_celery.patterns.limits.memory import MemoryConcurrencyBackend, MemoryRateLimitBackend
from xsm_celery.patterns.limits.protocols import (
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
from xsm_celery.patterns.limits.rate_limit import (
    BaseLimiter,
    LimiterStats,
    RateLimiter,
    TokenBucket,
    rate_limited,
)
from xsm_celery.patterns.limits.sliding_window import SlidingWindow, SlidingWindowLimiter

__all__ = [
    "AIMDBulkhead",
    "AIMDConfig",
    "Admission",
    "AimdParams",
    "BaseLimiter",
    "BreakerDecision",
    "BreakerSettings",
    "BreakerStateBackend",
    "BreakerStatus",
    "Bulkhead",
    "BulkheadConfig",
    "BulkheadStats",
    "ConcurrencyBackend",
    "LimiterStats",
    "MemoryConcurrencyBackend",
    "MemoryRateLimitBackend",
    "OutagePolicy",
    "RateAlgorithm",
    "RateLimitBackend",
    "RateLimiter",
    "RateSpec",
    "SlidingWindow",
    "SlidingWindowLimiter",
    "TokenBucket",
    "bulkhead",
    "rate_limited",
]
