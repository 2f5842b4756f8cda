"""The CloudEvents 1.0 envelope every event crosses a broker in.

An envelope is untrusted input: anyone who can publish to a topic can hand one to a
consumer. So it is validated when it is built (construction, ``from_json``, ``from_dict``)
and again before it becomes an engine event, and every failure is an
``EnvelopeCorruptError`` or ``EnvelopeTooLargeError`` that a consumer loop can
dead-letter, never a ``KeyError`` or ``RecursionError`` from deep inside it.

``subject`` is the machine instance key and the partition key; ``id`` is sortable and
is the idempotency key an inbox dedups on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar

from xsm_celery.engine.events import Event
from xsm_celery.errors import ConfigurationError, EnvelopeCorruptError, EnvelopeTooLargeError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.ids import new_id
from xsm_celery.persistence.memory import MAX_KEY_LENGTH

__all__ = [
    "ATTEMPT_EXTENSION",
    "CREDENTIAL_MARKERS",
    "DEFAULT_MAX_ENVELOPE_BYTES",
    "MAX_ATTRIBUTE_LENGTH",
    "MAX_DATA_DEPTH",
    "SPECVERSION",
    "Envelope",
    "EnvelopeCorruptError",
    "EnvelopeTooLargeError",
    "default_event_name",
    "is_credential_name",
    "new_id",
]

#: The CloudEvents version this module reads and writes.
SPECVERSION = "1.0"
#: The extension that carries the delivery attempt used for poison handling.
ATTEMPT_EXTENSION = "xsmattempt"
#: The byte cap checked before an envelope is parsed (the snapshots' cap).
DEFAULT_MAX_ENVELOPE_BYTES = 1024 * 1024
#: How deep ``data`` may nest; redaction and the dead-letter writer walk it recursively.
MAX_DATA_DEPTH = 64
#: The longest string attribute accepted.
MAX_ATTRIBUTE_LENGTH = 1024
#: Substrings that mark an extension or header name as carrying a credential.
CREDENTIAL_MARKERS = ("authorization", "cookie", "token", "secret", "apikey", "password")

_EXTENSION_NAME = re.compile(r"[a-z0-9]{1,20}")
_TRACEPARENT = re.compile(
    r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}"
)
_REQUIRED = ("id", "type", "source")
_OPTIONAL = (
    "subject",
    "time",
    "datacontenttype",
    "correlationid",
    "causationid",
    "machineid",
    "machineversion",
)
_ATTRIBUTES = frozenset(("specversion", "data", *_REQUIRED, *_OPTIONAL))


def default_event_name(envelope_type: str) -> str:
    """Map ``xsm.<machine>.<EVENT>`` to ``EVENT``; return any other type unchanged.

    Commands addressed to a chart carry its event name in the type; integration events
    (``order.paid``) are routed by their full type.
    """
    if envelope_type.startswith("xsm."):
        parts = envelope_type.split(".", 2)
        if len(parts) == 3 and parts[1] and parts[2]:
            return parts[2]
    return envelope_type


def is_credential_name(name: str) -> bool:
    """Tell whether an extension or header name looks like it carries a secret."""
    folded = name.lower().replace("-", "").replace("_", "")
    return any(marker in folded for marker in CREDENTIAL_MARKERS)


def _now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _check_string(name: str, value: object, *, required: bool) -> None:
    if value is None:
        if required:
            raise EnvelopeCorruptError(
                f"envelope attribute {name!r} missing; every CloudEvent needs "
                "specversion, id, type and source"
            )
        return
    if not isinstance(value, str) or not value:
        raise EnvelopeCorruptError(
            f"envelope attribute {name!r} must be a non-empty string, got {value!r:.80}"
        )
    limit = MAX_KEY_LENGTH if name in _KEY_ATTRIBUTES else MAX_ATTRIBUTE_LENGTH
    if len(value) > limit:
        raise EnvelopeCorruptError(
            f"envelope attribute {name!r} exceeds {limit} characters "
            f"({len(value)}); put long values in data"
        )


#: Attributes that become store keys or indexed columns. They are held to the stores' key
#: limit (``persistence.memory.MAX_KEY_LENGTH``, the narrowest column that keeps one), so an
#: envelope accepted here is one every store can keep, and a longer one is refused as
#: corrupt before any store sees it.
_KEY_ATTRIBUTES = frozenset({"id", "type", "source", "subject"})


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Build a JSON object, refusing a repeated key.

    Parsers disagree on which of two equal keys wins (first or last), so an envelope with
    ``"id"`` twice could be deduplicated under one id here and another elsewhere.
    """
    obj = dict(pairs)
    if len(obj) != len(pairs):
        names = [key for key, _ in pairs]
        repeated = next(key for index, key in enumerate(names) if key in names[:index])
        raise EnvelopeCorruptError(
            f"envelope JSON repeats the key {repeated!r:.80}; send each key once"
        )
    return obj


def _check_extension(name: object, value: object) -> None:
    if not isinstance(name, str) or not _EXTENSION_NAME.fullmatch(name):
        raise EnvelopeCorruptError(
            f"invalid CloudEvents extension name {name!r:.80}; use 1-20 lower-case "
            "letters or digits"
        )
    if name in _ATTRIBUTES:
        raise EnvelopeCorruptError(f"{name!r} is an envelope attribute, not an extension")
    if is_credential_name(name):
        raise EnvelopeCorruptError(
            f"extension {name!r} looks credential-bearing; send credentials on the "
            "transport, never in the event"
        )
    if name == ATTEMPT_EXTENSION and (
        isinstance(value, bool) or not isinstance(value, int) or value < 0
    ):
        raise EnvelopeCorruptError(
            f"{ATTEMPT_EXTENSION} must be a non-negative integer, got {value!r:.80}"
        )
    if not isinstance(value, str | int | bool):
        raise EnvelopeCorruptError(
            f"extension {name!r} must be a string, integer or boolean, got {type(value).__name__}"
        )
    if name == "traceparent" and not (isinstance(value, str) and _TRACEPARENT.fullmatch(value)):
        raise EnvelopeCorruptError(
            f"invalid W3C traceparent extension {value!r:.80}; expected "
            "'00-<32 hex>-<16 hex>-<2 hex>'"
        )


def _check_depth(data: object) -> None:
    """Refuse ``data`` nested deeper than ``MAX_DATA_DEPTH``, walking it without recursion."""
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        if depth >= MAX_DATA_DEPTH and children:
            raise EnvelopeCorruptError(
                f"envelope data is nested deeper than {MAX_DATA_DEPTH}; flatten the payload"
            )
        stack.extend((child, depth + 1) for child in children)


def _refuse_constant(name: str) -> None:
    raise ConfigurationError(f"{name} is not valid JSON")


@dataclass(frozen=True)
class Envelope:
    """A CloudEvents 1.0 event, immutable, validated when it is built.

    Build one with ``Envelope.new`` (fills ``id`` and ``time``) or
    ``Envelope.from_transition`` (stamps the causation chain); decode with
    ``from_json`` / ``from_dict``. ``with_attempt`` and ``replace`` return copies.
    ``extensions`` holds every further attribute; each name is checked.
    """

    type: str
    source: str = "xsm"
    subject: str | None = None
    id: str = ""
    time: str | None = None
    data: Any = None
    specversion: str = SPECVERSION
    datacontenttype: str | None = "application/json"
    correlationid: str | None = None
    causationid: str | None = None
    machineid: str | None = None
    machineversion: str | None = None
    extensions: Mapping[str, Any] = field(default_factory=dict)
    #: The JSON text a ``from_trusted_json`` envelope was made from, re-sent as it is. Set
    #: as an attribute, not through ``__dict__``, so no dict is built per outbox row.
    _wire: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        if self.id == "":
            object.__setattr__(self, "id", new_id())
        if not isinstance(self.extensions, dict):
            if not isinstance(self.extensions, Mapping):
                raise EnvelopeCorruptError("envelope extensions must be a mapping")
            object.__setattr__(self, "extensions", dict(self.extensions))
        self.validate()

    def __hash__(self) -> int:
        return hash(self.id)

    @classmethod
    def new(
        cls,
        *,
        type: str,
        subject: str | None = None,
        data: Any = None,
        source: str = "xsm",
        **attributes: Any,
    ) -> Envelope:
        """Return a fresh envelope with a new sortable ``id`` and ``time`` set to now."""
        attributes.setdefault("time", _now_rfc3339())
        return cls(type=type, source=source, subject=subject, data=data, **attributes)

    @classmethod
    def from_transition(
        cls,
        interpreter: Any,
        *,
        type: str,
        data: Any = None,
        cause: Envelope | None = None,
        subject: str | None = None,
        source: str | None = None,
    ) -> Envelope:
        """Return an outbound envelope describing what ``interpreter`` just did.

        ``causationid`` is the cause's id and ``correlationid`` is inherited from it
        (or is the cause's own id), so a whole conversation shares one correlation id.
        The subject is the cause's, then the instance's store key, then its id.
        """
        machine = interpreter.machine
        own_id = new_id()
        chosen = subject or (cause.subject if cause else None)
        if not chosen:
            chosen = str(getattr(interpreter, "store_key", None) or interpreter.id)
        extensions: dict[str, Any] = {}
        if cause is not None and "traceparent" in cause.extensions:
            extensions["traceparent"] = cause.extensions["traceparent"]
        emit(FactKind.OUTBOUND, carrier=extensions)
        version = getattr(machine, "version", None)
        return cls(
            type=type,
            source=source or f"xsm/{machine.id}",
            subject=chosen,
            id=own_id,
            time=_now_rfc3339(),
            data=data,
            correlationid=(cause.correlationid or cause.id) if cause else own_id,
            causationid=cause.id if cause else None,
            machineid=str(machine.id),
            machineversion=str(version) if version not in (None, "") else None,
            extensions=extensions,
        )

    def validate(self) -> Envelope:
        """Return ``self`` if its shape is valid; raise ``EnvelopeCorruptError`` otherwise."""
        if self.specversion != SPECVERSION:
            raise EnvelopeCorruptError(
                f"unsupported specversion {self.specversion!r:.40}; only {SPECVERSION!r} is read"
            )
        for name in _REQUIRED:
            _check_string(name, getattr(self, name), required=True)
        for name in _OPTIONAL:
            _check_string(name, getattr(self, name), required=False)
        for ext_name, value in self.extensions.items():
            _check_extension(ext_name, value)
        _check_depth(self.data)
        return self

    @property
    def attempt(self) -> int:
        """The delivery attempts recorded so far (0 for a first delivery)."""
        return int(self.extensions.get(ATTEMPT_EXTENSION, 0))

    def with_attempt(self, n: int) -> Envelope:
        """Return a copy whose ``xsmattempt`` extension is ``n``."""
        return replace(self, extensions={**self.extensions, ATTEMPT_EXTENSION: n})

    def replace(self, **changes: Any) -> Envelope:
        """Return a copy with ``changes`` applied and validated again."""
        return replace(self, **changes)

    def to_event(self, event_type: str | None = None) -> Event:
        """Return the engine ``Event`` this envelope delivers.

        The event name is ``event_type`` or ``default_event_name(type)``; ``data`` must
        be a JSON object (or absent) because it becomes the event's payload.
        """
        self.validate()
        if self.data is not None and not isinstance(self.data, dict):
            raise EnvelopeCorruptError(
                "envelope data not a JSON object: an event payload must be an object, "
                f'got {type(self.data).__name__}; wrap it as {{"value": ...}}'
            )
        return Event(event_type or default_event_name(self.type), dict(self.data or {}))

    def to_dict(self) -> dict[str, Any]:
        """Return the structured-mode JSON object, leaving out absent attributes."""
        out: dict[str, Any] = {}
        for item in fields(self):
            if item.name == "extensions":
                continue
            value = getattr(self, item.name)
            if value is not None:
                out[item.name] = value
        out.update(self.extensions)
        return out

    def to_json(self, *, max_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES) -> str:
        """Return the compact structured-mode JSON text, at most ``max_bytes`` long."""
        text = self._wire
        if text is None:
            try:
                text = json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)
            except (TypeError, ValueError, RecursionError) as exc:
                raise EnvelopeCorruptError(
                    f"envelope {self.id} data is not JSON ({exc}); send only JSON values"
                ) from exc
        size = len(text) if len(text) * 4 <= max_bytes else len(text.encode("utf-8"))
        if size > max_bytes:
            raise EnvelopeTooLargeError(
                f"envelope {self.id} is {size} bytes, over the {max_bytes}-byte cap; send a "
                "reference (an object-store key) instead of the payload, or raise max_bytes"
            )
        return text

    @classmethod
    def from_dict(cls, raw: object) -> Envelope:
        """Build an envelope from a decoded structured-mode object; unknown keys are extensions."""
        if not isinstance(raw, dict):
            raise EnvelopeCorruptError(
                f"envelope is not a JSON object (got {type(raw).__name__}); send a CloudEvent"
            )
        for name in ("specversion", *_REQUIRED):
            if name not in raw:
                raise EnvelopeCorruptError(
                    f"envelope attribute {name!r} missing; every CloudEvent needs "
                    "specversion, id, type and source"
                )
        for name in _REQUIRED:
            _check_string(name, raw[name], required=True)
        attributes = {key: value for key, value in raw.items() if key in _ATTRIBUTES}
        extensions = {key: value for key, value in raw.items() if key not in _ATTRIBUTES}
        return cls(**attributes, extensions=extensions)

    @classmethod
    def from_trusted_json(cls, text: str) -> Envelope:
        """Wrap JSON this library wrote after validating it, such as an outbox row.

        Nothing is checked again (the row was validated when it was added, and the file
        is the library's own), and ``to_json`` returns ``text`` as it is, so a relay
        neither re-validates nor re-encodes what it publishes. The text is parsed only
        when an attribute is first read: a relay publishing to one partition reads none,
        and the parse was a fifth of a batched relay's time. Never use it on input from
        a broker or a request: that is what ``from_json`` is for.
        """
        env = object.__new__(cls)
        object.__setattr__(env, "_wire", text)
        return env

    if not TYPE_CHECKING:  # mypy would otherwise accept any attribute name on an Envelope

        def __getattr__(self, name: str) -> Any:
            """Decode a ``from_trusted_json`` envelope on the first read of an attribute.

            Only such an envelope lacks its attributes: the class keeps no defaults (see
            ``_DEFAULTS``), and ``__init__`` sets every field.
            """
            state = self.__dict__
            text = self._wire
            if text is None or name not in _FIELD_NAMES or name in state:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            raw = json.loads(text)
            decoded = {key: raw.pop(key, default) for key, default in _DEFAULTS}
            decoded["extensions"] = raw
            state.update(decoded)
            return state[name]

    @classmethod
    def from_json(
        cls, text: str | bytes | bytearray, *, max_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES
    ) -> Envelope:
        """Decode a structured-mode envelope, checking its size before parsing it."""
        size = _encoded_size(text, max_bytes)
        if size > max_bytes:
            raise EnvelopeTooLargeError(
                f"envelope is {size} bytes, over the {max_bytes}-byte cap (checked before "
                "parsing); send a reference instead of the payload, or raise max_bytes"
            )
        try:
            raw = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
        except RecursionError as exc:
            raise EnvelopeCorruptError(
                f"envelope data is nested deeper than {MAX_DATA_DEPTH}; flatten the payload"
            ) from exc
        except ValueError as exc:
            raise EnvelopeCorruptError(f"envelope is not JSON: {exc}") from exc
        return cls.from_dict(raw)


#: Each attribute and its default, in field order: what a ``from_trusted_json`` envelope
#: fills in when first read.
_DEFAULTS: tuple[tuple[str, Any], ...] = tuple(
    (item.name, None if item.default is MISSING else item.default)
    for item in fields(Envelope)
    if item.name != "extensions"
)
_FIELD_NAMES = frozenset(item.name for item in fields(Envelope))
# The dataclass left each default on the class too, where a lazy envelope's attribute read
# would find it instead of reaching ``__getattr__``; ``__init__`` and ``fields()`` keep their
# own copies, so the class ones only hide the decode.
for _name in _FIELD_NAMES & set(vars(Envelope)):
    delattr(Envelope, _name)


def _encoded_size(text: object, max_bytes: int) -> int:
    """Return the UTF-8 size of ``text``, encoding only when the length alone cannot tell."""
    if isinstance(text, bytes | bytearray):
        return len(text)
    if not isinstance(text, str):
        raise EnvelopeCorruptError(f"envelope must be str or bytes, got {type(text).__name__}")
    if len(text) > max_bytes:
        return len(text)
    if len(text) * 4 <= max_bytes:
        return len(text)
    return len(text.encode("utf-8"))
