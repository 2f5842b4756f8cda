"""Envelope: CloudEvents shape, validation of untrusted input, size and depth caps."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from xsm_celery.eda import (
    ATTEMPT_EXTENSION,
    MAX_DATA_DEPTH,
    SPECVERSION,
    Envelope,
    EnvelopeCorruptError,
    EnvelopeTooLargeError,
    default_event_name,
    new_id,
)
from xsm_celery.errors import XsmError
from xsm_celery.ids import new_id as ids_new_id

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _raw(**changes: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "specversion": "1.0",
        "id": "e-1",
        "type": "xsm.order.PAY",
        "source": "shop",
        "subject": "o-1",
        "data": {"total": 5},
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


def _deep(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_constants_have_the_seed_values() -> None:
    """The spec version, attempt extension and depth cap are the documented literals."""
    assert (SPECVERSION, ATTEMPT_EXTENSION, MAX_DATA_DEPTH) == ("1.0", "xsmattempt", 64)
    assert new_id is ids_new_id


def test_new_fills_id_and_time() -> None:
    """Envelope.new mints a sortable id and an RFC 3339 UTC time."""
    a = Envelope.new(type="t", subject="s")
    b = Envelope.new(type="t", subject="s")
    assert a.id < b.id
    assert a.time is not None
    assert a.time.endswith("Z")
    assert a.specversion == "1.0"
    assert a.source == "xsm"


def test_envelope_is_frozen_and_hashable() -> None:
    """An envelope cannot be changed in place and can sit in a set."""
    env = Envelope.new(type="t")
    with pytest.raises(AttributeError):
        env.type = "u"  # type: ignore[misc]
    assert env in {env}


def test_json_round_trip_keeps_everything() -> None:
    """to_json / from_json give back an equal envelope, extensions included."""
    env = Envelope.new(
        type="order.paid",
        subject="o-1",
        data={"total": 5, "items": [{"sku": "a"}]},
        correlationid="c-1",
        causationid="k-1",
        machineid="order",
        machineversion="3",
        extensions={"traceparent": TRACEPARENT, "tenant": "t1", "xsmattempt": 2},
    )
    back = Envelope.from_json(env.to_json())
    assert back == env
    assert back.attempt == 2


def test_to_dict_is_structured_mode() -> None:
    """Extensions sit beside the core attributes; absent attributes are left out."""
    env = Envelope(type="t", source="s", id="i", extensions={"tenant": "x"})
    assert env.to_dict() == {
        "type": "t",
        "source": "s",
        "id": "i",
        "specversion": "1.0",
        "datacontenttype": "application/json",
        "tenant": "x",
    }


@pytest.mark.parametrize("missing", ["id", "type", "source", "specversion"])
def test_missing_required_attribute_is_corrupt(missing: str) -> None:
    """A CloudEvent without a required attribute is refused with its name."""
    raw = _raw()
    del raw[missing]
    with pytest.raises(EnvelopeCorruptError, match=f"envelope attribute '{missing}' missing"):
        Envelope.from_dict(raw)


@pytest.mark.parametrize("value", ["", 5, None, ["x"]])
def test_required_attribute_must_be_a_non_empty_string(value: object) -> None:
    """An empty or non-string id is refused, never replaced by a fresh one."""
    raw = _raw()
    raw["id"] = value
    with pytest.raises(EnvelopeCorruptError, match="'id'"):
        Envelope.from_dict(raw)


def test_overlong_attribute_is_corrupt() -> None:
    """A string attribute over the length cap is refused."""
    with pytest.raises(EnvelopeCorruptError, match="exceeds 1024 characters"):
        Envelope.from_dict(_raw(correlationid="s" * 2000))


def test_non_string_subject_is_corrupt() -> None:
    """An optional attribute of the wrong type is refused."""
    with pytest.raises(EnvelopeCorruptError, match="must be a non-empty string"):
        Envelope.from_dict(_raw(subject=42))


def test_unsupported_specversion_is_corrupt() -> None:
    """Only CloudEvents 1.0 is read."""
    with pytest.raises(EnvelopeCorruptError, match="specversion"):
        Envelope.from_dict(_raw(specversion="0.3"))


@pytest.mark.parametrize("name", ["Tenant", "ten-ant", "x" * 21, "t_1"])
def test_invalid_extension_name_is_corrupt(name: str) -> None:
    """Extension names are 1-20 lower-case letters or digits."""
    with pytest.raises(EnvelopeCorruptError, match="invalid CloudEvents extension name"):
        Envelope.from_dict(_raw(**{name: "v"}))


def test_attribute_name_as_extension_is_corrupt() -> None:
    """A core attribute name cannot be smuggled in as an extension."""
    with pytest.raises(EnvelopeCorruptError, match="is an envelope attribute, not an extension"):
        Envelope(type="t", extensions={"subject": "x"})


@pytest.mark.parametrize(
    "name",
    ["authorization", "cookie", "accesstoken", "tokenid", "clientsecret", "apikey", "password"],
)
def test_credential_bearing_extension_is_refused(name: str) -> None:
    """Extension names that carry credentials are refused, on build and on decode."""
    with pytest.raises(EnvelopeCorruptError, match=f"extension '{name}' looks credential-bearing"):
        Envelope(type="t", extensions={name: "x"})
    with pytest.raises(EnvelopeCorruptError, match="credential-bearing"):
        Envelope.from_dict(_raw(**{name: "x"}))


@pytest.mark.parametrize("value", [1.5, None, [1], {"a": 1}])
def test_extension_value_type_is_checked(value: object) -> None:
    """Extension values are strings, integers or booleans."""
    with pytest.raises(EnvelopeCorruptError, match="must be a string, integer or boolean"):
        Envelope(type="t", extensions={"tenant": value})


@pytest.mark.parametrize(
    "value",
    [
        "garbage",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        TRACEPARENT + "\n",
    ],
)
def test_bad_traceparent_is_corrupt(value: str) -> None:
    """traceparent must match the W3C Trace Context grammar."""
    with pytest.raises(EnvelopeCorruptError, match="invalid W3C traceparent extension"):
        Envelope(type="t", extensions={"traceparent": value})


def test_good_traceparent_is_accepted() -> None:
    """A well-formed traceparent passes."""
    assert Envelope(type="t", extensions={"traceparent": TRACEPARENT}).extensions["traceparent"]


@pytest.mark.parametrize("value", [-1, "2", True, 1.0])
def test_attempt_must_be_a_non_negative_integer(value: object) -> None:
    """xsmattempt is a non-negative integer."""
    with pytest.raises(EnvelopeCorruptError, match="xsmattempt must be a non-negative integer"):
        Envelope.from_dict(_raw(xsmattempt=value))


def test_with_attempt_returns_a_copy() -> None:
    """with_attempt sets the counter on a copy; the original keeps its own."""
    env = Envelope.new(type="t")
    again = env.with_attempt(3)
    assert (env.attempt, again.attempt) == (0, 3)
    assert again.id == env.id
    with pytest.raises(EnvelopeCorruptError):
        env.with_attempt(-1)


def test_not_json_is_corrupt() -> None:
    """Text that is not JSON is corrupt."""
    with pytest.raises(EnvelopeCorruptError, match="envelope is not JSON"):
        Envelope.from_json("{not json")


@pytest.mark.parametrize("text", ["[1, 2]", '"x"', "null", "3"])
def test_non_object_json_is_corrupt(text: str) -> None:
    """A JSON value that is not an object is corrupt."""
    with pytest.raises(EnvelopeCorruptError, match="not a JSON object"):
        Envelope.from_json(text)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_standard_json_constants_are_corrupt(constant: str) -> None:
    """NaN and Infinity are not JSON, even though Python's parser accepts them."""
    with pytest.raises(EnvelopeCorruptError, match="not JSON"):
        Envelope.from_json(json.dumps(_raw(data=None))[:-1] + f', "data": {{"x": {constant}}}}}')


def test_oversized_text_is_refused_before_parsing() -> None:
    """An envelope over the byte cap is too large, even when it is not JSON at all."""
    with pytest.raises(EnvelopeTooLargeError, match="over the 100-byte cap"):
        Envelope.from_json("x" * 101, max_bytes=100)
    with pytest.raises(EnvelopeTooLargeError):
        Envelope.from_json(b"x" * 101, max_bytes=100)


def test_size_counts_utf8_bytes() -> None:
    """The cap is in bytes, so multi-byte characters count for their encoded size."""
    text = json.dumps(_raw(data={"s": "é" * 40}), ensure_ascii=False)
    size = len(text.encode())
    assert Envelope.from_json(text, max_bytes=size).data == {"s": "é" * 40}
    with pytest.raises(EnvelopeTooLargeError):
        Envelope.from_json(text, max_bytes=size - 1)


def test_to_json_refuses_oversized_and_non_json_data() -> None:
    """Encoding checks the cap and refuses values JSON cannot hold."""
    with pytest.raises(EnvelopeTooLargeError):
        Envelope.new(type="t", data={"b": "x" * 500}).to_json(max_bytes=100)
    with pytest.raises(EnvelopeCorruptError, match="not JSON"):
        Envelope.new(type="t", data={"when": object()}).to_json()
    with pytest.raises(EnvelopeCorruptError, match="not JSON"):
        Envelope.new(type="t", data={"x": float("nan")}).to_json()


def test_data_at_the_depth_cap_is_accepted() -> None:
    """Data nested exactly MAX_DATA_DEPTH deep is fine."""
    assert Envelope.new(type="t", data={"d": _deep(MAX_DATA_DEPTH - 1)}).data


def test_deeply_nested_data_is_corrupt() -> None:
    """Data nested past MAX_DATA_DEPTH is refused on build and on decode."""
    with pytest.raises(EnvelopeCorruptError, match="envelope data is nested deeper than 64"):
        Envelope.new(type="t", data={"d": _deep(MAX_DATA_DEPTH)})
    text = json.dumps(_raw(data={"d": _deep(MAX_DATA_DEPTH + 5)}))
    with pytest.raises(EnvelopeCorruptError, match="nested deeper than 64"):
        Envelope.from_json(text)


def test_parser_breaking_depth_is_corrupt_not_recursion_error() -> None:
    """Nesting deep enough to break the JSON parser is corrupt, never a RecursionError."""
    text = "[" * 200_000 + "]" * 200_000
    with pytest.raises(EnvelopeCorruptError):
        Envelope.from_json(text, max_bytes=1_000_000)


def test_errors_are_library_errors() -> None:
    """Both envelope errors derive from XsmError."""
    assert issubclass(EnvelopeCorruptError, XsmError)
    assert issubclass(EnvelopeTooLargeError, XsmError)


@pytest.mark.parametrize(
    ("envelope_type", "event"),
    [
        ("xsm.order.PAY", "PAY"),
        ("xsm.order.done.invoke.x", "done.invoke.x"),
        ("order.paid", "order.paid"),
        ("xsm.order", "xsm.order"),
        ("xsm..PAY", "xsm..PAY"),
        ("xsm.order.", "xsm.order."),
    ],
)
def test_default_event_name(envelope_type: str, event: str) -> None:
    """xsm.<machine>.<EVENT> maps to EVENT; anything else is unchanged."""
    assert default_event_name(envelope_type) == event


def test_from_transition_stamps_the_causation_chain() -> None:
    """An outbound envelope points at its cause and inherits the correlation id."""
    machine = SimpleNamespace(id="order", version="2")
    interp = SimpleNamespace(machine=machine, id="order", store_key="o-9")
    cause = Envelope.new(
        type="xsm.order.PAY",
        subject="o-1",
        correlationid="c-1",
        extensions={"traceparent": TRACEPARENT},
    )
    out = Envelope.from_transition(interp, type="order.paid", data={"x": 1}, cause=cause)
    assert out.causationid == cause.id
    assert out.correlationid == "c-1"
    assert out.subject == "o-1"
    assert out.source == "xsm/order"
    assert (out.machineid, out.machineversion) == ("order", "2")
    assert out.extensions == {"traceparent": TRACEPARENT}


def test_from_transition_without_a_cause_starts_a_conversation() -> None:
    """With no cause, the subject is the store key and the correlation id is its own id."""
    interp = SimpleNamespace(
        machine=SimpleNamespace(id="order", version=None), id="order", store_key="o-9"
    )
    out = Envelope.from_transition(interp, type="order.paid")
    assert out.subject == "o-9"
    assert out.correlationid == out.id
    assert out.causationid is None
    assert out.machineversion is None


def test_correlation_falls_back_to_the_cause_id() -> None:
    """A cause without a correlation id starts the chain with its own id."""
    interp = SimpleNamespace(machine=SimpleNamespace(id="m", version=None), id="m", store_key=None)
    cause = Envelope.new(type="t", subject="s")
    assert Envelope.from_transition(interp, type="u", cause=cause).correlationid == cause.id


def test_trusted_json_equals_the_validated_decode() -> None:
    """from_trusted_json gives the same envelope as from_json and re-sends the same text."""
    env = Envelope.new(
        type="order.paid", subject="o-1", data={"total": 5}, extensions={"tenant": "t"}
    )
    text = env.to_json()
    trusted = Envelope.from_trusted_json(text)
    assert trusted == Envelope.from_json(text)
    assert trusted.to_json() is text
    assert trusted.with_attempt(2).to_json() != text


def test_trusted_json_is_parsed_on_the_first_attribute_read() -> None:
    """A stored envelope re-sends its text unparsed, and decodes fully on the first read."""
    env = Envelope.new(
        type="order.paid", subject="o-1", data={"total": 5}, extensions={"tenant": "t"}
    )
    trusted = Envelope.from_trusted_json(env.to_json())
    assert trusted.to_json() == env.to_json()
    assert set(vars(trusted)) == {"_wire"}
    assert trusted.subject == "o-1"
    assert (trusted.type, trusted.data) == ("order.paid", {"total": 5})
    assert trusted.extensions == {"tenant": "t"}
    assert trusted.source == "xsm"
    assert trusted.attempt == 0
    with pytest.raises(AttributeError):
        trusted.no_such_attribute  # the read itself is what is tested


def test_trusted_json_fills_in_the_defaults_an_old_row_left_out() -> None:
    """A row written without the optional attributes reads them as their defaults."""
    trusted = Envelope.from_trusted_json('{"type":"t","id":"i-1","specversion":"1.0"}')
    assert trusted == Envelope(type="t", id="i-1", datacontenttype="application/json")
    assert Envelope(type="t").source == "xsm"


def test_trusted_json_still_checks_the_size_cap() -> None:
    """A cached text over the cap is refused like any other."""
    text = Envelope.new(type="t", data={"b": "x" * 500}).to_json()
    with pytest.raises(EnvelopeTooLargeError):
        Envelope.from_trusted_json(text).to_json(max_bytes=100)
