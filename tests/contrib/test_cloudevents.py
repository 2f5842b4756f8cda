"""CloudEvents interop: HTTP binary and structured modes without the SDK, SDK objects with it."""

from __future__ import annotations

import sys

import pytest

from xsm_celery.contrib.cloudevents import (
    STRUCTURED_CONTENT_TYPE,
    from_cloudevent,
    from_http,
    to_binary,
    to_cloudevent,
    to_structured,
)
from xsm_celery.eda import Envelope, EnvelopeCorruptError, EnvelopeTooLargeError
from xsm_celery.errors import MissingExtraError

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _env(**extra: object) -> Envelope:
    return Envelope.new(
        type="order.paid",
        subject="o 42 %é",
        data={"total": 99, "items": ["a"]},
        correlationid="c-1",
        extensions={"traceparent": TRACEPARENT, "tenant": "t1", **extra},
    )


def test_structured_round_trip() -> None:
    """to_structured / from_http give back an equal envelope."""
    env = _env(xsmattempt=2)
    headers, body = to_structured(env)
    assert headers == {"content-type": STRUCTURED_CONTENT_TYPE}
    assert from_http(headers, body) == env


def test_binary_round_trip() -> None:
    """to_binary / from_http keep every attribute, non-ASCII and spaces included."""
    env = _env(xsmattempt=2)
    headers, body = to_binary(env)
    assert headers["content-type"] == "application/json"
    assert headers["ce-type"] == "order.paid"
    assert headers["ce-subject"] == "o%2042%20%25%C3%A9"
    assert all(v.isascii() for v in headers.values())
    back = from_http(headers, body)
    assert back == env
    assert back.attempt == 2


def test_binary_headers_are_case_insensitive() -> None:
    """Header names may arrive in any case, as a mapping or as pairs."""
    headers, body = to_binary(_env())
    pairs = [(k.upper(), v) for k, v in headers.items()]
    assert from_http(pairs, body).type == "order.paid"


def test_from_http_drops_credential_headers() -> None:
    """Authorization and credential-bearing ce-* headers never become extensions."""
    headers, body = to_binary(_env())
    headers["authorization"] = "Bearer abc"
    headers["ce-apitoken"] = "secret"
    headers["ce-cookie"] = "c"
    headers["x-custom"] = "not an attribute"
    env = from_http(headers, body)
    assert set(env.extensions) == {"traceparent", "tenant"}


def test_binary_text_body() -> None:
    """A non-JSON content type carries its body as text data."""
    env = Envelope.new(type="note", data="hello", datacontenttype="text/plain")
    headers, body = to_binary(env)
    assert body == b"hello"
    assert from_http(headers, body).data == "hello"


def test_binary_without_data() -> None:
    """An event without data has an empty body and comes back without data."""
    env = Envelope.new(type="ping", subject="s")
    headers, body = to_binary(env)
    assert body == b""
    assert from_http(headers, body).data is None


def test_from_http_checks_size_before_parsing() -> None:
    """A body over the cap is refused before it is parsed."""
    with pytest.raises(EnvelopeTooLargeError):
        from_http({"content-type": STRUCTURED_CONTENT_TYPE}, b"{" * 200, max_bytes=100)


def test_from_http_refuses_bad_input() -> None:
    """Missing attributes, bad JSON and bad traceparents are corrupt envelopes."""
    with pytest.raises(EnvelopeCorruptError, match="missing"):
        from_http({"content-type": "application/json", "ce-type": "t"}, b"{}")
    headers, _ = to_binary(_env())
    with pytest.raises(EnvelopeCorruptError, match="not JSON"):
        from_http(headers, b"{nope")
    headers["ce-traceparent"] = "bogus"
    with pytest.raises(EnvelopeCorruptError, match="traceparent"):
        from_http(headers, b"{}")


def test_sdk_round_trip() -> None:
    """to_cloudevent / from_cloudevent round-trip through the SDK object."""
    pytest.importorskip("cloudevents")
    env = _env()
    event = to_cloudevent(env)
    assert event["type"] == "order.paid"
    assert from_cloudevent(event) == env


def test_from_cloudevent_of_the_2x_core_event() -> None:
    """The SDK 2.x core event, whose time is a datetime, converts too."""
    core = pytest.importorskip("cloudevents.core.v1.event")
    from datetime import datetime, timezone

    event = core.CloudEvent(
        {
            "type": "t",
            "source": "s",
            "id": "i-1",
            "specversion": "1.0",
            "time": datetime(2024, 1, 2, tzinfo=timezone.utc),
        },
        {"a": 1},
    )
    env = from_cloudevent(event)
    assert env.time == "2024-01-02T00:00:00Z"
    assert env.data == {"a": 1}


def test_from_cloudevent_refuses_other_objects() -> None:
    """A value that is not an SDK event is a TypeError."""
    with pytest.raises(TypeError):
        from_cloudevent({"type": "t"})


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the SDK, to_cloudevent raises MissingExtraError naming [cloudevents]."""
    for name in ("cloudevents", "cloudevents.http", "cloudevents.v1", "cloudevents.v1.http"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingExtraError, match=r"xsm-celery\[cloudevents\]") as info:
        to_cloudevent(_env())
    assert info.value.extra == "cloudevents"
    assert isinstance(info.value, ImportError)


def test_http_helpers_need_no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The HTTP modes work with the SDK unavailable."""
    monkeypatch.setitem(sys.modules, "cloudevents", None)
    headers, body = to_binary(_env())
    assert from_http(headers, body).type == "order.paid"
