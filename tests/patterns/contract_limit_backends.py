"""The behaviour every limit backend shares, as reusable test suites.

Subclass a contract in a test module and give it a ``backend`` fixture; every test then
runs against that implementation::

    class TestRedisRates(RateLimitBackendContract):
        @pytest.fixture
        def backend(self, redis_url):
            return RedisRateLimitBackend(redis.Redis.from_url(redis_url), prefix=unique())

The suites use only the Protocols of ``xsm_celery.patterns.limits.protocols`` and real time
(windows of a few hundred milliseconds), so a backend that reads its server's clock passes
them as well as the memory ones. Every key is fresh per test, so a shared server is fine.
Lease tests wait ``short_lease_s``: 0.3 s in memory, overridden with the 2 s floor that
``checks.FLEET_LEASE_S`` sets for a lease kept in Redis.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from xsm_celery.patterns.limits.protocols import (
    BreakerSettings,
    BreakerStateBackend,
    ConcurrencyBackend,
    RateLimitBackend,
    RateSpec,
)

__all__ = ["BreakerStateBackendContract", "ConcurrencyBackendContract", "RateLimitBackendContract"]


def fresh(label: str) -> str:
    """A key no other test (or helper sharing the server) uses."""
    return f"contract:{label}:{uuid.uuid4().hex}"


def race(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` on ``count`` threads released at once; return the results in order."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        barrier.wait(timeout=10)
        results[index] = work(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not any(t.is_alive() for t in threads)
    return results


class RateLimitBackendContract:
    """What ``acquire`` and ``reset`` promise, for both algorithms."""

    def test_a_fresh_key_admits_its_burst_then_refuses(self, backend: RateLimitBackend) -> None:
        """A new key starts full: ``burst`` admissions, then a refusal with a wait."""
        key, spec = fresh("burst"), RateSpec(rate=1, per_s=10, burst=3)
        assert [backend.acquire(key, 1, spec).allowed for _ in range(4)] == [1, 1, 1, 0]

    def test_a_refusal_says_when_the_tokens_will_be_back(self, backend: RateLimitBackend) -> None:
        """``retry_after_s`` is the time the missing tokens take to refill."""
        key, spec = fresh("wait"), RateSpec(rate=2, per_s=1, burst=2)
        backend.acquire(key, 2, spec)
        refusal = backend.acquire(key, 1, spec)
        assert not refusal.allowed
        assert 0.3 < refusal.retry_after_s <= 0.5

    def test_a_refused_call_takes_nothing(self, backend: RateLimitBackend) -> None:
        """After a refusal for cost 3, a cost that fits is still admitted."""
        key, spec = fresh("nothing"), RateSpec(rate=1, per_s=60, burst=3)
        backend.acquire(key, 1, spec)
        assert not backend.acquire(key, 3, spec).allowed
        assert backend.acquire(key, 2, spec).allowed

    def test_tokens_refill_with_time(self, backend: RateLimitBackend) -> None:
        """Waiting ``retry_after_s`` is enough for the refused cost to be admitted."""
        key, spec = fresh("refill"), RateSpec(rate=10, per_s=1, burst=1)
        assert backend.acquire(key, 1, spec).allowed
        refusal = backend.acquire(key, 1, spec)
        assert not refusal.allowed
        time.sleep(refusal.retry_after_s + 0.02)
        assert backend.acquire(key, 1, spec).allowed

    def test_keys_are_independent(self, backend: RateLimitBackend) -> None:
        """Emptying one key leaves another full."""
        spec = RateSpec(rate=1, per_s=60, burst=1)
        first, second = fresh("a"), fresh("b")
        assert backend.acquire(first, 1, spec).allowed
        assert not backend.acquire(first, 1, spec).allowed
        assert backend.acquire(second, 1, spec).allowed

    def test_reset_refills_a_key(self, backend: RateLimitBackend) -> None:
        """An operator reset makes the next acquire see a full limit."""
        key, spec = fresh("reset"), RateSpec(rate=1, per_s=60, burst=2)
        backend.acquire(key, 2, spec)
        backend.reset(key)
        assert backend.acquire(key, 2, spec).allowed

    @pytest.mark.parametrize("cost", [0, -1, 4, float("nan"), float("inf")])
    def test_an_impossible_cost_is_refused_with_an_error(
        self, backend: RateLimitBackend, cost: float
    ) -> None:
        """A cost <= 0 or over the capacity could never be admitted: ValueError, not a wait."""
        with pytest.raises(ValueError, match="cost"):
            backend.acquire(fresh("cost"), cost, RateSpec(rate=1, per_s=1, burst=3))

    def test_racing_threads_never_share_the_last_token(self, backend: RateLimitBackend) -> None:
        """Sixteen threads at once on a bucket of five: exactly five are admitted."""
        key, spec = fresh("race"), RateSpec(rate=1, per_s=600, burst=5)
        results = race(16, lambda _: backend.acquire(key, 1, spec).allowed)
        assert sum(results) == 5

    def test_a_sliding_window_admits_rate_per_window(self, backend: RateLimitBackend) -> None:
        """Three per 0.3 s: a fourth is refused until the first admission leaves the window."""
        key, spec = fresh("window"), RateSpec(rate=3, per_s=0.3, algorithm="sliding_window")
        assert [backend.acquire(key, 1, spec).allowed for _ in range(4)] == [1, 1, 1, 0]
        refusal = backend.acquire(key, 1, spec)
        assert 0 < refusal.retry_after_s <= 0.3
        time.sleep(refusal.retry_after_s + 0.02)
        assert backend.acquire(key, 1, spec).allowed

    def test_a_sliding_window_ignores_burst(self, backend: RateLimitBackend) -> None:
        """A window's capacity is its rate, whatever burst says."""
        key = fresh("window-burst")
        spec = RateSpec(rate=2, per_s=60, burst=50, algorithm="sliding_window")
        assert [backend.acquire(key, 1, spec).allowed for _ in range(3)] == [1, 1, 0]


class ConcurrencyBackendContract:
    """What leased slots promise: a limit, idempotent holders, reclaimed leases."""

    #: The shortest lease the backend accepts that the lease tests can wait out.
    short_lease_s = 0.3

    def test_the_limit_holds_and_a_refusal_waits(self, backend: ConcurrencyBackend) -> None:
        """Two slots: two holders admitted, the third refused with a wait within the lease."""
        key = fresh("limit")
        assert backend.acquire(key, "a", 2, 5.0).allowed
        assert backend.acquire(key, "b", 2, 5.0).allowed
        refusal = backend.acquire(key, "c", 2, 5.0)
        assert not refusal.allowed
        assert 0 < refusal.retry_after_s <= 5.0
        assert backend.in_use(key) == 2

    def test_a_holder_never_takes_two_slots(self, backend: ConcurrencyBackend) -> None:
        """Acquiring again as the same holder is admitted and still counts one slot."""
        key = fresh("idem")
        assert backend.acquire(key, "a", 2, 5.0).allowed
        assert backend.acquire(key, "a", 2, 5.0).allowed
        assert backend.in_use(key) == 1

    def test_release_frees_the_slot(self, backend: ConcurrencyBackend) -> None:
        """A released slot goes to the next holder; releasing twice is a no-op."""
        key = fresh("release")
        backend.acquire(key, "a", 1, 5.0)
        assert backend.release(key, "a") is True
        assert backend.release(key, "a") is False
        assert backend.acquire(key, "b", 1, 5.0).allowed

    def test_an_expired_lease_is_reclaimed(self, backend: ConcurrencyBackend) -> None:
        """A holder that stops renewing loses its slot after the lease, and cannot renew."""
        key = fresh("expire")
        backend.acquire(key, "dead", 1, self.short_lease_s)
        assert not backend.acquire(key, "b", 1, 5.0).allowed
        time.sleep(self.short_lease_s * 1.2)
        assert backend.acquire(key, "b", 1, 5.0).allowed
        assert backend.renew(key, "dead", 5.0) is False

    def test_renewing_keeps_the_slot(self, backend: ConcurrencyBackend) -> None:
        """A lease renewed before it runs out is still held after the original lease."""
        key = fresh("renew")
        lease = self.short_lease_s
        backend.acquire(key, "a", 1, lease)
        time.sleep(lease / 2)
        assert backend.renew(key, "a", lease) is True
        time.sleep(lease * 5 / 6)
        assert backend.in_use(key) == 1
        assert not backend.acquire(key, "b", 1, 5.0).allowed

    def test_a_lowered_limit_evicts_nobody(self, backend: ConcurrencyBackend) -> None:
        """Holders above a lowered limit keep their slots; newcomers wait."""
        key = fresh("lower")
        for holder in "abc":
            assert backend.acquire(key, holder, 3, 5.0).allowed
        assert not backend.acquire(key, "d", 1, 5.0).allowed
        assert backend.in_use(key) == 3
        assert backend.acquire(key, "a", 1, 5.0).allowed

    @pytest.mark.parametrize(("limit", "lease"), [(0, 1.0), (1, 0.0), (1, float("nan"))])
    def test_bad_arguments_are_refused(
        self, backend: ConcurrencyBackend, limit: int, lease: float
    ) -> None:
        """A limit under 1 or a lease that is not positive and finite is a ValueError."""
        with pytest.raises(ValueError):
            backend.acquire(fresh("bad"), "a", limit, lease)

    def test_racing_threads_never_exceed_the_limit(self, backend: ConcurrencyBackend) -> None:
        """Sixteen holders at once for three slots: exactly three are admitted."""
        key = fresh("race")
        results = race(16, lambda i: backend.acquire(key, f"h{i}", 3, 5.0).allowed)
        assert sum(results) == 3
        assert backend.in_use(key) == 3


FAST = BreakerSettings(failure_threshold=2, cooldown_ms=200, half_open_max_calls=1)


class BreakerStateBackendContract:
    """``CircuitBreaker``'s chart semantics, as a backend must keep them."""

    def trip(self, backend: BreakerStateBackend, name: str, settings: BreakerSettings) -> None:
        """Open ``name`` by reporting ``failure_threshold`` failures."""
        for _ in range(settings.failure_threshold):
            decision = backend.admit(name, settings)
            backend.record(name, settings, decision.status.generation, failed=True, probe=False)

    def test_an_unknown_breaker_is_closed(self, backend: BreakerStateBackend) -> None:
        """A name never seen admits calls, not as probes."""
        decision = backend.admit(fresh("new"), FAST)
        assert (decision.allowed, decision.probe, decision.status.state) == (True, False, "closed")

    def test_consecutive_failures_open_it(self, backend: BreakerStateBackend) -> None:
        """``failure_threshold`` failures open the circuit, which then refuses with a wait."""
        name = fresh("trip")
        self.trip(backend, name, FAST)
        refusal = backend.admit(name, FAST)
        assert not refusal.allowed
        assert refusal.status.state == "open"
        assert 0 < refusal.status.retry_after_s <= 0.2
        assert refusal.status.opened_count == 1

    def test_a_success_clears_the_count(self, backend: BreakerStateBackend) -> None:
        """Failure, success, failure never reaches a threshold of two."""
        name = fresh("clear")
        for failed in (True, False, True):
            gen = backend.admit(name, FAST).status.generation
            status = backend.record(name, FAST, gen, failed=failed, probe=False)
        assert status.state == "closed"
        assert status.failures == 1

    def test_the_cooldown_leads_to_exactly_the_allowed_probes(
        self, backend: BreakerStateBackend
    ) -> None:
        """After the cooldown, ``half_open_max_calls`` probes are admitted and no more."""
        settings = BreakerSettings(failure_threshold=1, cooldown_ms=200, half_open_max_calls=2)
        name = fresh("probes")
        self.trip(backend, name, settings)
        time.sleep(0.25)
        decisions = [backend.admit(name, settings) for _ in range(3)]
        assert [(d.allowed, d.probe) for d in decisions] == [(True, True)] * 2 + [(False, False)]
        assert decisions[2].status.state == "half_open"

    def test_probe_successes_close_it(self, backend: BreakerStateBackend) -> None:
        """``success_threshold`` probe successes close the circuit."""
        name = fresh("close")
        self.trip(backend, name, FAST)
        time.sleep(0.25)
        probe = backend.admit(name, FAST)
        status = backend.record(name, FAST, probe.status.generation, failed=False, probe=True)
        assert status.state == "closed"
        assert backend.admit(name, FAST).probe is False

    def test_a_probe_failure_opens_it_again(self, backend: BreakerStateBackend) -> None:
        """A failed probe re-opens the circuit for another cooldown."""
        name = fresh("reopen")
        self.trip(backend, name, FAST)
        time.sleep(0.25)
        probe = backend.admit(name, FAST)
        status = backend.record(name, FAST, probe.status.generation, failed=True, probe=True)
        assert status.state == "open"
        assert status.opened_count == 2

    def test_a_stale_outcome_changes_nothing(self, backend: BreakerStateBackend) -> None:
        """A success admitted before the trip cannot close a half-open circuit."""
        name = fresh("stale")
        old = backend.admit(name, FAST).status.generation
        self.trip(backend, name, FAST)
        time.sleep(0.25)
        probe = backend.admit(name, FAST)
        assert probe.probe
        status = backend.record(name, FAST, old, failed=False, probe=False)
        assert status.state == "half_open"
        status = backend.record(name, FAST, old, failed=True, probe=False)
        assert (status.state, status.opened_count) == ("half_open", 1)

    def test_release_frees_a_probe_slot(self, backend: BreakerStateBackend) -> None:
        """A probe released without an outcome lets the next call probe."""
        name = fresh("release")
        self.trip(backend, name, FAST)
        time.sleep(0.25)
        probe = backend.admit(name, FAST)
        assert not backend.admit(name, FAST).allowed
        backend.release(name, probe.status.generation)
        assert backend.admit(name, FAST).probe

    def test_reset_closes_and_bumps_the_generation(self, backend: BreakerStateBackend) -> None:
        """An operator reset closes an open circuit and outdates every earlier admission."""
        name = fresh("reset")
        before = backend.admit(name, FAST).status.generation
        self.trip(backend, name, FAST)
        status = backend.reset(name)
        assert status.state == "closed"
        assert status.generation > before
        assert backend.status(name, FAST).state == "closed"

    def test_a_failure_rate_opens_it(self, backend: BreakerStateBackend) -> None:
        """Half of a full window of four failing opens the circuit, with no two in a row."""
        settings = BreakerSettings(failure_threshold=10, failure_rate_threshold=0.5, window_size=4)
        name = fresh("rate")
        states = []
        for failed in (False, True, False, True):
            gen = backend.admit(name, settings).status.generation
            states.append(backend.record(name, settings, gen, failed=failed, probe=False).state)
        assert states == ["closed", "closed", "closed", "open"]

    def test_racing_threads_take_exactly_the_probe_slots(
        self, backend: BreakerStateBackend
    ) -> None:
        """Twelve threads at once on a half-open circuit with two slots: two probes run."""
        settings = BreakerSettings(failure_threshold=1, cooldown_ms=150, half_open_max_calls=2)
        name = fresh("race")
        self.trip(backend, name, settings)
        time.sleep(0.2)
        results = race(12, lambda _: backend.admit(name, settings).allowed)
        assert sum(results) == 2
