"""CloudEvents interop: the official SDK's objects and the HTTP binary / structured modes.

The HTTP helpers (``to_binary``, ``to_structured``, ``from_http``) need no SDK: the HTTP
binding is a handful of header rules, written here with the standard library. Only
``to_cloudevent`` / ``from_cloudevent``, which hand over SDK objects, need the
``cloudevents`` package (``pip install "xsm-celery[cloudevents]"``); 1.x and 2.x layouts work.

``from_http`` reads attributes only from ``ce-*`` headers and drops credential-bearing
ones, so an ``Authorization`` or ``ce-apitoken`` header can never become an extension.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from xsm_celery.eda.envelope import (
    ATTEMPT_EXTENSION,
    DEFAULT_MAX_ENVELOPE_BYTES,
    Envelope,
    is_credential_name,
)
from xsm_celery.errors import (
    ArgumentTypeError,
    EnvelopeCorruptError,
    EnvelopeTooLargeError,
    MissingExtraError,
)

__all__ = [
    "STRUCTURED_CONTENT_TYPE",
    "from_cloudevent",
    "from_http",
    "to_binary",
    "to_cloudevent",
    "to_structured",
]

#: The content type of a structured-mode request.
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
_HEADER_PREFIX = "ce-"
# The HTTP binding percent-encodes space, double quote, percent and anything outside
# printable ASCII; every other printable character travels as is.
_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')


def _sdk_event_class() -> Any:
    """Return the SDK's ``CloudEvent`` class, from the 1.x or the 2.x layout."""
    try:
        from cloudevents.http import CloudEvent  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        try:
            from cloudevents.v1.http import (  # type: ignore[import-not-found, unused-ignore]
                CloudEvent,
            )
        except ImportError as exc:
            raise MissingExtraError(
                extra="cloudevents",
                module="cloudevents",
                hint="the core envelope needs nothing; only SDK objects need the SDK",
            ) from exc
    return CloudEvent


def to_cloudevent(envelope: Envelope) -> Any:
    """Return the SDK ``CloudEvent`` carrying ``envelope``'s attributes and data."""
    event_class = _sdk_event_class()
    attributes = envelope.to_dict()
    data = attributes.pop("data", None)
    return event_class(attributes, data)


def from_cloudevent(event: Any) -> Envelope:
    """Return the ``Envelope`` of an SDK event (either layout), validated like any input."""
    try:
        attributes = dict(event.get_attributes())
        data = event.get_data()
    except AttributeError as exc:
        raise ArgumentTypeError(
            f"from_cloudevent() needs a CloudEvents SDK event, got {type(event).__name__}"
        ) from exc
    for name, value in list(attributes.items()):
        if isinstance(value, datetime):
            attributes[name] = value.isoformat().replace("+00:00", "Z")
    if isinstance(data, bytes | bytearray):
        data = _decode_body(bytes(data), attributes.get("datacontenttype"))
    if data is not None:
        attributes["data"] = data
    return Envelope.from_dict(attributes)


def _encode_header(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return urllib.parse.quote(text, safe=_SAFE)


def to_binary(envelope: Envelope) -> tuple[dict[str, str], bytes]:
    """Return ``(headers, body)`` for HTTP binary mode: attributes as ``ce-*`` headers."""
    attributes = envelope.to_dict()
    data = attributes.pop("data", None)
    content_type = attributes.pop("datacontenttype", None) or "application/json"
    headers = {"content-type": content_type}
    for name, value in attributes.items():
        headers[f"{_HEADER_PREFIX}{name}"] = _encode_header(value)
    if data is None:
        return headers, b""
    if isinstance(data, str) and not _is_json(content_type):
        return headers, data.encode("utf-8")
    return headers, json.dumps(data, separators=(",", ":"), allow_nan=False).encode("utf-8")


def to_structured(envelope: Envelope) -> tuple[dict[str, str], bytes]:
    """Return ``(headers, body)`` for HTTP structured mode: the whole event as JSON."""
    return {"content-type": STRUCTURED_CONTENT_TYPE}, envelope.to_json().encode("utf-8")


def _is_json(content_type: str | None) -> bool:
    if not content_type:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _decode_body(body: bytes, content_type: str | None) -> Any:
    if not body:
        return None
    if _is_json(content_type):
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise EnvelopeCorruptError(f"envelope data is not JSON: {exc}") from exc
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvelopeCorruptError(
            f"binary-mode body of type {content_type!r} is not UTF-8 text; send JSON"
        ) from exc


def _header_items(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(name).lower(), str(value)) for name, value in items]


def _binary_attributes(items: list[tuple[str, str]]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for name, value in items:
        if not name.startswith(_HEADER_PREFIX):
            continue
        attribute = name[len(_HEADER_PREFIX) :]
        if is_credential_name(attribute):
            continue
        decoded = urllib.parse.unquote(value)
        if attribute == ATTEMPT_EXTENSION and decoded.isdigit():
            attributes[attribute] = int(decoded)
        else:
            attributes[attribute] = decoded
    return attributes


def from_http(
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    body: bytes | str | None,
    *,
    max_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
) -> Envelope:
    """Decode an HTTP request in either mode into a validated ``Envelope``.

    The body's size is checked before it is parsed. Only ``ce-*`` headers become
    attributes, and credential-bearing ones are dropped.
    """
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body or b"")
    if len(raw) > max_bytes:
        raise EnvelopeTooLargeError(
            f"request body is {len(raw)} bytes, over the {max_bytes}-byte cap (checked "
            "before parsing); send a reference instead of the payload"
        )
    items = _header_items(headers)
    content_type = next((v for k, v in items if k == "content-type"), None)
    if content_type and content_type.lower().startswith("application/cloudevents+json"):
        return Envelope.from_json(raw, max_bytes=max_bytes)
    attributes = _binary_attributes(items)
    if content_type:
        attributes["datacontenttype"] = content_type
    data = _decode_body(raw, content_type)
    if data is not None:
        attributes["data"] = data
    return Envelope.from_dict(attributes)
