"""The DeadLetter record: its fields, JSON round trip and refusals."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xsm_celery.patterns import DeadLetter, DeadLetterReason


def make(**overrides: object) -> DeadLetter:
    values: dict[str, object] = {
        "machine_id": "job",
        "state_id": "job.deadLettered",
        "event": {"type": "xsm.after.1000.job.retrying", "payload": {}},
        "attempts": 3,
        "errors": [
            {"source": "service", "name": "work", "type": "ConnectionError", "message": "503"}
        ],
        "snapshot": {"context": {"attempt": 3}},
        "taken_at": 1_700_000_000.5,
    }
    values.update(overrides)
    return DeadLetter(**values)  # type: ignore[arg-type]


def test_defaults() -> None:
    """A new record gets a sortable id, reason dead_letter_state and empty optional fields."""
    first, second = make(), make()
    assert first.id
    assert first.id < second.id
    assert first.reason == "dead_letter_state"
    assert first.resolved_at is None
    assert first.envelope is None
    assert first.task_name is None


def test_json_round_trip() -> None:
    """to_json / from_json give back an equal record."""
    record = make(
        task_name="billing.charge",
        task_args=[1, "a"],
        task_kwargs={"k": 2},
        reason="task_exhausted",
    )
    again = DeadLetter.from_json(record.to_json())
    assert again == record
    assert json.loads(record.to_json())["task_name"] == "billing.charge"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    payload=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    attempts=st.none() | st.integers(min_value=0, max_value=10**6),
    taken_at=st.floats(min_value=0, max_value=4e9),
    reason=st.sampled_from(list(DeadLetterReason)),
)
def test_round_trip_property(
    payload: dict[str, object], attempts: int | None, taken_at: float, reason: DeadLetterReason
) -> None:
    """Any JSON payload, attempts, time and reason survive to_json / from_json."""
    record = make(
        event={"type": "E", "payload": payload}, attempts=attempts, taken_at=taken_at, reason=reason
    )
    assert DeadLetter.from_json(record.to_json()) == record


def test_reason_enum_is_stored_as_string() -> None:
    """Passing the enum stores its value, so the JSON is a plain string."""
    assert make(reason=DeadLetterReason.WORKER_LOST).reason == "worker_lost"


def test_unknown_reason_lists_the_valid_ones() -> None:
    """An unknown reason is refused with the valid reasons listed."""
    with pytest.raises(ValueError, match="max_attempts"):
        make(reason="because")


def test_from_dict_ignores_unknown_keys() -> None:
    """A record written by a newer version (extra keys) still loads."""
    raw = make().to_dict() | {"added_in_v2": True}
    assert DeadLetter.from_dict(raw).machine_id == "job"


def test_from_dict_names_missing_fields() -> None:
    """A dict without required fields is refused naming them."""
    with pytest.raises(ValueError, match="state_id, taken_at"):
        DeadLetter.from_dict(
            {"machine_id": "x", "event": {}, "attempts": None, "errors": [], "snapshot": {}}
        )


def test_from_json_refuses_non_objects() -> None:
    """JSON that is not an object, or not JSON at all, raises ValueError."""
    with pytest.raises(ValueError):
        DeadLetter.from_json("[1, 2]")
    with pytest.raises(ValueError):
        DeadLetter.from_json("{not json")


def test_record_is_frozen() -> None:
    """Records are immutable; stores replace them (mark_resolved) instead."""
    with pytest.raises(AttributeError):
        make().attempts = 4  # type: ignore[misc]


def test_to_json_survives_non_json_values() -> None:
    """A value JSON cannot carry is written as its str() instead of failing the sink."""
    record = make(snapshot={"context": {"when": {1, 2}}})
    assert json.loads(record.to_json())["snapshot"]["context"]["when"] == "{1, 2}"
