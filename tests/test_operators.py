"""The operator helpers shared by the CLI, the Django commands and replays."""

from __future__ import annotations

import getpass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xsm_celery.operators import AGE_UNITS_S, UNKNOWN_ACTOR, current_actor, parse_age


@given(number=st.integers(0, 10_000), unit=st.sampled_from(sorted(AGE_UNITS_S)))
def test_an_age_is_its_number_times_its_unit(number: int, unit: str) -> None:
    """``<n><unit>`` is n times the unit's seconds, with or without spaces around."""
    assert parse_age(f"{number}{unit}") == number * AGE_UNITS_S[unit]
    assert parse_age(f" {number} {unit} ") == number * AGE_UNITS_S[unit]


@pytest.mark.parametrize("text", ["", "10", "d", "-1d", "1y", "1.5.2h", "ten days"])
def test_a_malformed_age_says_how_to_write_one(text: str) -> None:
    """Anything but a number and one of s, m, h, d, w is refused with examples."""
    with pytest.raises(ValueError, match=r"e\.g\. 90s, 15m, 12h, 30d, 2w"):
        parse_age(text)


def test_an_explicit_actor_wins_and_the_login_is_the_default() -> None:
    """A given actor is kept; none (or empty) falls back to this process's login name."""
    assert current_actor("ops@example") == "ops@example"
    assert current_actor(None) == current_actor("") == getpass.getuser()


def test_a_process_without_a_login_name_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a container without a passwd entry the audit row says who: unknown."""

    def no_user() -> str:
        raise KeyError("uid 12345 not found")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert current_actor() == UNKNOWN_ACTOR
