"""RetryPolicy.delay_ms's written-out common path gives exactly the checked formula's value."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from xsm_celery.patterns import RetryPolicy
from xsm_celery.patterns.jitter import Jitter, apply_jitter

FINITE = st.floats(0, 1e7, allow_nan=False)


@given(
    base=FINITE,
    factor=st.floats(1, 10),
    cap=st.one_of(FINITE, st.just(math.inf)),
    jitter=st.sampled_from(list(Jitter)),
    attempt=st.integers(1, 200),
    draw=st.floats(0, 1),
    previous=st.one_of(
        st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**6)
    ),
)
def test_the_fast_path_equals_the_reference_formula(
    *,
    base: float,
    factor: float,
    cap: float,
    jitter: Jitter,
    attempt: int,
    draw: float,
    previous: float | None,
) -> None:
    """For every mode, attempt, draw and previous delay: same float as apply_jitter gives."""
    policy = RetryPolicy(base_ms=base, factor=factor, max_ms=cap, jitter=jitter, rng=lambda: draw)
    expected = apply_jitter(
        jitter,
        policy.exponential_ms(attempt),
        draw,
        base_ms=base,
        cap_ms=cap,
        previous_ms=base if previous is None else float(previous),
    )
    assert policy.delay_ms(attempt, previous_ms=previous) == expected
