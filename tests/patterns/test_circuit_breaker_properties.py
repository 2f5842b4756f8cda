"""Breaker invariants under any sequence of outcomes, waits and resets (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsm_celery.engine import SimulatedClock
from xsm_celery.patterns import CircuitBreaker, CircuitOpenError

COOLDOWN = 100
operations = st.lists(
    st.sampled_from(["ok", "fail", "wait", "half_wait", "reset"]), min_size=1, max_size=60
)


class Model:
    """A plain-Python breaker with the documented rules, to compare against."""

    def __init__(self, threshold: int, successes: int) -> None:
        self.threshold, self.successes = threshold, successes
        self.state, self.failures, self.opened, self.elapsed, self.won = "closed", 0, 0, 0, 0

    def wait(self, ms: int) -> None:
        self.elapsed += ms
        if self.state == "open" and self.elapsed >= COOLDOWN:
            self.state, self.won = "half_open", 0

    def call(self, ok: bool) -> str:
        if self.state == "open":
            return "rejected"
        if self.state == "half_open":
            if ok:
                self.won += 1
                if self.won >= self.successes:
                    self.state, self.failures = "closed", 0
            else:
                self.trip()
            return "ran"
        if ok:
            self.failures = 0
        else:
            self.failures += 1
            if self.failures >= self.threshold:
                self.trip()
        return "ran"

    def trip(self) -> None:
        self.state, self.opened, self.elapsed = "open", self.opened + 1, 0

    def reset(self) -> None:
        self.state, self.failures = "closed", 0


def _fail() -> None:
    raise RuntimeError("x")


@settings(max_examples=150, deadline=None)
@given(ops=operations, threshold=st.integers(1, 4), successes=st.integers(1, 3))
def test_breaker_matches_the_model(ops: list[str], threshold: int, successes: int) -> None:
    """Sequential calls: state, failures and trip count always equal a plain model's."""
    clock = SimulatedClock()
    breaker = CircuitBreaker(
        failure_threshold=threshold, cooldown_ms=COOLDOWN, success_threshold=successes, clock=clock
    )
    model = Model(threshold, successes)
    for op in ops:
        if op in ("wait", "half_wait"):
            ms = COOLDOWN if op == "wait" else COOLDOWN // 2
            clock.increment(ms)
            model.wait(ms)
        elif op == "reset":
            breaker.reset()
            model.reset()
        else:
            expected = model.call(op == "ok")
            if expected == "rejected":
                with pytest.raises(CircuitOpenError):
                    breaker.call(lambda: None)
            elif op == "ok":
                breaker.call(lambda: None)
            else:
                with pytest.raises(RuntimeError):
                    breaker.call(_fail)
        assert breaker.state == model.state, ops
        assert breaker.opened_count == model.opened
        if model.state == "closed":
            assert breaker.failures == model.failures
