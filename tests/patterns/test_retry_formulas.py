"""The retry formulas as properties: every delay stays inside the bounds the seed states."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xsm_celery.patterns import Jitter, RetryPolicy

DRAWS = 10_000

bases = st.floats(min_value=0, max_value=1e6, allow_nan=False)
factors = st.floats(min_value=1, max_value=1e7, allow_nan=False, allow_infinity=False)
caps = st.one_of(st.floats(min_value=0, max_value=1e9, allow_nan=False), st.just(math.inf))
attempts = st.integers(min_value=1, max_value=10**7)
draws = st.floats(min_value=0, max_value=1)


def _expected_exp(base: float, factor: float, cap: float, attempt: int) -> float:
    try:
        return min(cap, base * factor ** (attempt - 1)) if base else 0.0
    except OverflowError:
        return cap


@settings(max_examples=300, deadline=None)
@given(base=bases, factor=factors, cap=caps, attempt=attempts)
def test_none_is_exactly_the_capped_exponential(
    base: float, factor: float, cap: float, attempt: int
) -> None:
    """'none' equals min(cap, base * factor ** (n - 1)) and never overflows."""
    policy = RetryPolicy(base_ms=base, factor=factor, max_ms=cap, jitter="none")
    assert policy.delay_ms(attempt) == _expected_exp(base, factor, cap, attempt)


@settings(max_examples=300, deadline=None)
@given(base=bases, factor=factors, cap=caps, attempt=attempts, draw=draws)
def test_full_is_within_zero_and_exp(
    base: float, factor: float, cap: float, attempt: int, draw: float
) -> None:
    """'full' lies in [0, exp] and so in [0, max_ms]."""
    policy = RetryPolicy(base_ms=base, factor=factor, max_ms=cap, jitter="full", rng=lambda: draw)
    exp = policy.exponential_ms(attempt)
    delay = policy.delay_ms(attempt)
    assert 0.0 <= delay <= exp <= cap


@settings(max_examples=300, deadline=None)
@given(base=bases, factor=factors, cap=caps, attempt=attempts, draw=draws)
def test_equal_is_within_half_exp_and_exp(
    base: float, factor: float, cap: float, attempt: int, draw: float
) -> None:
    """'equal' lies in [exp/2, exp]."""
    policy = RetryPolicy(base_ms=base, factor=factor, max_ms=cap, jitter="equal", rng=lambda: draw)
    exp = policy.exponential_ms(attempt)
    delay = policy.delay_ms(attempt)
    assert exp / 2 <= delay <= exp <= cap


@settings(max_examples=300, deadline=None)
@given(
    base=bases,
    cap=caps,
    previous=st.floats(min_value=0, max_value=1e9, allow_nan=False),
    draw=draws,
)
def test_decorrelated_is_within_base_and_three_times_previous(
    base: float, cap: float, previous: float, draw: float
) -> None:
    """'decorrelated' lies in [base, min(cap, 3 * prev)] when the cap is above base, else it is the cap."""
    policy = RetryPolicy(base_ms=base, max_ms=cap, jitter="decorrelated", rng=lambda: draw)
    prev = max(previous, base)
    delay = policy.delay_ms(1, previous_ms=prev)
    if cap < base:
        assert delay == cap
    else:
        assert base <= delay <= min(cap, 3 * prev)


@pytest.mark.parametrize("mode", list(Jitter))
def test_ten_thousand_seeded_draws_stay_in_bounds(mode: Jitter) -> None:
    """10,000 seeded draws per mode: every delay in [0, max_ms] and in its mode's range."""
    rng = random.Random(265)
    policy = RetryPolicy(
        max_attempts=10, base_ms=100, factor=2.0, max_ms=5_000, jitter=mode, rng=rng.random
    )
    previous: float | None = None
    for n in range(DRAWS):
        attempt = n % 12 + 1
        exp = policy.exponential_ms(attempt)
        delay = policy.delay_ms(attempt, previous_ms=previous)
        assert 0.0 <= delay <= policy.max_ms
        if mode is Jitter.NONE:
            assert delay == exp
        elif mode is Jitter.FULL:
            assert delay <= exp
        elif mode is Jitter.EQUAL:
            assert exp / 2 <= delay <= exp
        else:
            prev = policy.base_ms if previous is None else previous
            assert policy.base_ms <= delay <= min(policy.max_ms, 3 * prev)
            previous = delay


def test_decorrelated_is_not_monotone() -> None:
    """Decorrelated delays go down as well as up over a run (non-monotone by design)."""
    rng = random.Random(7)
    policy = RetryPolicy(base_ms=100, max_ms=10_000, jitter="decorrelated", rng=rng.random)
    delays, previous = [], None
    for attempt in range(1, 200):
        previous = policy.delay_ms(attempt, previous_ms=previous)
        delays.append(previous)
    assert any(b < a for a, b in itertools.pairwise(delays))
    assert any(b > a for a, b in itertools.pairwise(delays))


@pytest.mark.parametrize(
    ("factor", "attempt"), [(1e6, 100), (2.0, 10**6), (1e300, 3), (2.0, 10**20)]
)
def test_huge_growth_gives_the_cap_not_overflow(factor: float, attempt: int) -> None:
    """factor=1e6 or attempt=10**6 give max_ms, never OverflowError."""
    for mode in Jitter:
        policy = RetryPolicy(
            base_ms=100, factor=factor, max_ms=30_000, jitter=mode, rng=lambda: 1.0
        )
        assert 0 <= policy.delay_ms(attempt) <= 30_000
    assert RetryPolicy(base_ms=100, factor=factor, jitter="none").delay_ms(attempt) == 30_000


def test_infinite_cap_means_no_cap() -> None:
    """max_ms=inf leaves the exponential uncapped."""
    policy = RetryPolicy(base_ms=100, factor=10.0, max_ms=math.inf, jitter="none")
    assert policy.delay_ms(10) == 100 * 10.0**9


def test_rng_of_exactly_one_is_accepted_and_capped() -> None:
    """An rng returning exactly 1.0 is legal; full jitter then gives exp, capped."""
    policy = RetryPolicy(base_ms=100, max_ms=250, jitter="full", rng=lambda: 1.0)
    assert policy.delay_ms(1) == 100
    assert policy.delay_ms(5) == 250


@pytest.mark.parametrize("bad", [math.nan, 1.5, -0.1, math.inf])
@pytest.mark.parametrize("mode", ["full", "equal", "decorrelated"])
def test_rng_outside_unit_interval_is_refused(bad: float, mode: str) -> None:
    """An rng returning NaN, 1.5 or -0.1 raises ValueError instead of a bad delay."""
    policy = RetryPolicy(jitter=mode, rng=lambda: bad)
    with pytest.raises(ValueError, match=r"rng\(\) must return a float in \[0, 1\]"):
        policy.delay_ms(1)


def test_no_jitter_never_calls_the_rng() -> None:
    """'none' draws nothing, so a broken rng does not matter there."""
    policy = RetryPolicy(jitter="none", rng=lambda: math.nan)
    assert policy.delay_ms(2) == 400


def test_decorrelated_with_cap_below_base_returns_the_cap() -> None:
    """max_ms < base_ms with decorrelated jitter returns max_ms."""
    policy = RetryPolicy(base_ms=1_000, max_ms=300, jitter="decorrelated", rng=lambda: 0.5)
    assert policy.delay_ms(1) == 300
    assert policy.delay_ms(4, previous_ms=300) == 300


@pytest.mark.parametrize("previous", [math.nan, -5.0, math.inf])
def test_decorrelated_ignores_an_unusable_previous_delay(previous: float) -> None:
    """A NaN, negative or infinite previous delay counts as base, keeping the bounds."""
    policy = RetryPolicy(base_ms=100, max_ms=math.inf, jitter="decorrelated", rng=lambda: 1.0)
    assert policy.delay_ms(3, previous_ms=previous) == 300


def test_equal_and_full_with_uncapped_overflow_stay_infinite_not_nan() -> None:
    """With no cap an overflowing exponential gives inf, never NaN, even for a zero draw."""
    for mode in ("full", "equal"):
        policy = RetryPolicy(base_ms=100, factor=2.0, max_ms=math.inf, jitter=mode, rng=lambda: 0.0)
        assert policy.delay_ms(10**6) == math.inf


def test_zero_base_gives_zero_delays() -> None:
    """base_ms=0 gives zero delays even where factor ** n overflows (0 * inf is not NaN)."""
    policy = RetryPolicy(base_ms=0, factor=1e300, max_ms=math.inf, jitter="none")
    assert policy.delay_ms(5) == 0.0
