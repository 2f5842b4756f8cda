"""Label values stay bounded whatever a fact carries."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from xsm_celery.metrics.labels import MAX_LABEL_LENGTH, OTHER, LabelGuard, field_of, label_value

_SAFE = re.compile(r"[A-Za-z0-9_.:/\-]*")


@given(st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.none(), st.booleans()))
def test_any_value_becomes_a_short_safe_label(value: object) -> None:
    """Every value becomes a label of the safe alphabet and at most the maximum length."""
    label = label_value(value)
    assert len(label) <= MAX_LABEL_LENGTH
    assert _SAFE.fullmatch(label)


def test_plain_names_are_kept_and_odd_ones_refused() -> None:
    """Task and exception names pass; spaces, quotes and long text become 'other'."""
    assert label_value("shop.tasks.charge") == "shop.tasks.charge"
    assert label_value("ConnectionError") == "ConnectionError"
    assert label_value(None) == ""
    assert label_value(True) == "true"
    assert label_value('card 4111 "x"') == OTHER
    assert label_value("a" * (MAX_LABEL_LENGTH + 1)) == OTHER


@given(st.lists(st.text(alphabet="abc", min_size=1, max_size=6), min_size=1, max_size=60))
def test_guard_admits_at_most_its_limit_of_distinct_sets(names: list[str]) -> None:
    """A guard never lets more than its limit of distinct label sets through (plus 'other')."""
    guard = LabelGuard(limit=5)
    seen = {guard.admit((name,)) for name in names}
    assert len(seen - {(OTHER,)}) <= 5
    assert all(guard.admit((n,)) in seen for n in names)


def test_field_of_reads_the_first_present_spelling() -> None:
    """Two spellings of one field are both understood, the first present wins."""
    assert field_of({"name": "b", "breaker": None}, "breaker", "name") == "b"
    assert field_of({"breaker": "a", "name": "b"}, "breaker", "name") == "a"
    assert field_of({}, "breaker") is None
