"""The memory backends pass the limit backend contracts, and leases keep their limit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.patterns.contract_limit_backends import (
    BreakerStateBackendContract,
    ConcurrencyBackendContract,
    RateLimitBackendContract,
)
from xsm_celery.engine import SimulatedClock
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


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 4),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["acquire", "renew", "release", "wait"]),
            st.integers(0, 5),
            st.floats(0.1, 3.0),
        ),
        max_size=60,
    ),
)
def test_leased_slots_never_exceed_the_limit(limit: int, ops: list[tuple[str, int, float]]) -> None:
    """Whatever the mix of acquires, renewals, releases and expiries, live holders <= limit."""
    clock = SimulatedClock()
    backend = MemoryConcurrencyBackend(clock=clock)
    for op, holder, seconds in ops:
        if op == "acquire":
            admission = backend.acquire("k", f"h{holder}", limit, seconds)
            assert admission.allowed or admission.retry_after_s > 0
        elif op == "renew":
            backend.renew("k", f"h{holder}", seconds)
        elif op == "release":
            backend.release("k", f"h{holder}")
        else:
            clock.increment(seconds * 1000)
        assert backend.in_use("k") <= limit
