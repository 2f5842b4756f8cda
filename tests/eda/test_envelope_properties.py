"""Property tests: any valid envelope survives encoding, and the caps always hold."""

from __future__ import annotations

import contextlib
import string

from hypothesis import given
from hypothesis import strategies as st

from xsm_celery.eda import Envelope, EnvelopeCorruptError, EnvelopeTooLargeError

_text = st.text(min_size=1, max_size=40)
_json_scalar = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
_json_finite = _json_scalar | st.floats(allow_nan=False, allow_infinity=False)
_json = st.recursive(
    _json_finite,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_ext_name = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=20).filter(
    lambda n: (
        n not in {"id", "type", "source", "subject", "time", "data", "specversion"}
        and not any(
            m in n for m in ("authorization", "cookie", "token", "secret", "apikey", "password")
        )
        and n
        not in {"datacontenttype", "correlationid", "causationid", "machineid", "machineversion"}
        and n not in {"traceparent", "xsmattempt"}
    )
)
_ext_value = st.text(max_size=20) | st.integers(-(2**53), 2**53) | st.booleans()


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    """Any valid envelope with JSON data and arbitrary extensions."""
    return Envelope.new(
        type=draw(_text),
        subject=draw(st.none() | _text),
        source=draw(_text),
        data=draw(_json),
        correlationid=draw(st.none() | _text),
        causationid=draw(st.none() | _text),
        extensions=draw(st.dictionaries(_ext_name, _ext_value, max_size=4)),
    )


@given(envelopes())
def test_json_round_trip(env: Envelope) -> None:
    """from_json(to_json(e)) == e for every valid envelope."""
    assert Envelope.from_json(env.to_json()) == env


@given(envelopes())
def test_dict_round_trip(env: Envelope) -> None:
    """from_dict(to_dict(e)) == e for every valid envelope."""
    assert Envelope.from_dict(env.to_dict()) == env


@given(envelopes(), st.integers(0, 2**31))
def test_with_attempt_round_trips(env: Envelope, n: int) -> None:
    """The attempt counter survives encoding."""
    assert Envelope.from_json(env.with_attempt(n).to_json()).attempt == n


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_escape_as_other_errors(blob: bytes) -> None:
    """Any byte string decodes to an envelope or raises an envelope error, nothing else."""
    with contextlib.suppress(EnvelopeCorruptError, EnvelopeTooLargeError):
        Envelope.from_json(blob, max_bytes=200)


@given(envelopes(), st.integers(1, 400))
def test_size_cap_is_exact(env: Envelope, cap: int) -> None:
    """to_json succeeds exactly when the encoded size is within the cap."""
    size = len(env.to_json().encode())
    try:
        env.to_json(max_bytes=cap)
        assert size <= cap
    except EnvelopeTooLargeError:
        assert size > cap
