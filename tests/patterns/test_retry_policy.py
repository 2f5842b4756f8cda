"""RetryPolicy arguments, presets and the retry_on / give_up_on decision."""

from __future__ import annotations

import math

import pytest

from xsm_celery.patterns import Jitter, RetryPolicy


def test_defaults_match_the_seed() -> None:
    """Defaults: 5 attempts, 200 ms base, factor 2, cap 30 s, full jitter."""
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.base_ms, policy.factor, policy.max_ms) == (
        5,
        200,
        2.0,
        30_000,
    )
    assert policy.jitter is Jitter.FULL


def test_seed_delays_without_jitter() -> None:
    """The seed's first example prints [200.0, 400.0, 800.0, 1600.0, 3200.0]."""
    policy = RetryPolicy(max_attempts=5, base_ms=200, factor=2.0, max_ms=30_000, jitter="none")
    assert [policy.delay_ms(n) for n in range(1, 6)] == [200.0, 400.0, 800.0, 1600.0, 3200.0]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"base_ms": math.nan}, "base_ms"),
        ({"base_ms": -1}, "base_ms"),
        ({"base_ms": math.inf}, "base_ms"),
        ({"max_ms": math.nan}, "max_ms"),
        ({"max_ms": -0.5}, "max_ms"),
        ({"factor": math.nan}, "factor"),
        ({"factor": -2.0}, "factor"),
        ({"factor": math.inf}, "factor"),
        ({"factor": 0.5}, "factor"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": -3}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"base_ms": "100"}, "base_ms"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(
    kwargs: dict[str, object], name: str
) -> None:
    """NaN / negative / out-of-range arguments raise ValueError naming the argument and range."""
    with pytest.raises(ValueError, match=name) as info:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert "must be" in str(info.value)


def test_bad_jitter_lists_the_valid_choices() -> None:
    """An unknown jitter string is refused with every valid mode in the message."""
    with pytest.raises(ValueError, match="jitter") as info:
        RetryPolicy(jitter="random")
    for mode in ("'none'", "'full'", "'equal'", "'decorrelated'"):
        assert mode in str(info.value)


def test_jitter_string_becomes_an_enum() -> None:
    """The seed's strings are turned into Jitter members at the boundary."""
    assert RetryPolicy(jitter="decorrelated").jitter is Jitter.DECORRELATED
    assert RetryPolicy(jitter=Jitter.EQUAL).jitter is Jitter.EQUAL


def test_non_callable_rng_is_refused() -> None:
    """rng must be callable."""
    with pytest.raises(TypeError, match="rng"):
        RetryPolicy(rng=0.5)  # type: ignore[arg-type]


def test_attempt_below_one_is_refused() -> None:
    """delay_ms takes the 1-based number of the failed attempt."""
    with pytest.raises(ValueError, match="1-based"):
        RetryPolicy().delay_ms(0)


def test_policy_is_frozen_and_comparable() -> None:
    """A policy is an immutable value: equal arguments, equal policies."""
    policy = RetryPolicy(max_attempts=3, jitter="none")
    assert policy == RetryPolicy(max_attempts=3, jitter="none")
    with pytest.raises(AttributeError):
        policy.max_attempts = 9  # type: ignore[misc]


def test_presets() -> None:
    """aggressive() and conservative() give the documented shapes and accept overrides."""
    fast = RetryPolicy.aggressive()
    assert (fast.max_attempts, fast.base_ms, fast.factor) == (5, 100, 1.5)
    slow = RetryPolicy.conservative(jitter="none")
    assert (slow.max_attempts, slow.base_ms, slow.factor, slow.jitter) == (
        3,
        2_000,
        2.0,
        Jitter.NONE,
    )
    assert slow.delay_ms(2) == 4_000


def test_give_up_on_wins_over_retry_on() -> None:
    """An error in give_up_on is never retried, even if retry_on also matches."""
    policy = RetryPolicy(retry_on=(OSError,), give_up_on=PermissionError)
    assert policy.should_retry(ConnectionError("reset"))
    assert not policy.should_retry(PermissionError("denied"))
    assert not policy.should_retry(ValueError("bad input"))
    assert policy.should_retry("an error payload that is not an exception")


def test_retry_on_must_be_exception_classes() -> None:
    """retry_on / give_up_on refuse anything but exception classes."""
    with pytest.raises(TypeError, match="retry_on"):
        RetryPolicy(retry_on=("ValueError",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="give_up_on"):
        RetryPolicy(give_up_on=(int,))  # type: ignore[arg-type]
