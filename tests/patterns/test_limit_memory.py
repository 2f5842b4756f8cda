"""The memory backends pass the limit backend contracts."""

from __future__ import annotations

import pytest

from tests.patterns.contract_limit_backends import (
    BreakerStateBackendContract,
    ConcurrencyBackendContract,
    RateLimitBackendContract,
)
from xsm_celery.patterns import (
    MemoryBreakerStateBackend,
    MemoryConcurrencyBackend,
    MemoryRateLimitBackend,
)


class TestMemoryRateLimitBackend(RateLimitBackendContract):
    """``MemoryRateLimitBackend`` keeps the rate limit contract."""

    @pytest.fixture
    def backend(self) -> MemoryRateLimitBackend:
        """A fresh memory backend on wall time."""
        return MemoryRateLimitBackend()


class TestMemoryConcurrencyBackend(ConcurrencyBackendContract):
    """``MemoryConcurrencyBackend`` keeps the leased slot contract."""

    @pytest.fixture
    def backend(self) -> MemoryConcurrencyBackend:
        """A fresh memory backend on wall time."""
        return MemoryConcurrencyBackend()


class TestMemoryBreakerStateBackend(BreakerStateBackendContract):
    """``MemoryBreakerStateBackend`` keeps the breaker state contract."""

    @pytest.fixture
    def backend(self) -> MemoryBreakerStateBackend:
        """A fresh memory backend on wall time."""
        return MemoryBreakerStateBackend()
