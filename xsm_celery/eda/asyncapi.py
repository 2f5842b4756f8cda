"""AsyncAPI 3.0.0 documents generated from a chart, and their validation offline.

The chart already says what a service consumes (its ``on`` keys, sent as CloudEvents
``xsm.<machine>.<EVENT>``) and what it publishes (``meta.publish`` and ``publish``-tagged
states, see ``publish_specs``), so the document is derived from the same JSON that runs: it
cannot drift from the code. Every message is a CloudEvents 1.0 envelope in structured mode.

Generation needs nothing outside the standard library. ``validate_asyncapi`` checks a
document against the official AsyncAPI 3.0.0 JSON Schema, shipped with the package
(``schemas/``, Apache-2.0, see the README there) so it works offline; it needs
``jsonschema`` (the ``asyncapi`` extra), imported only when called.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from xsm_celery.eda.envelope import SPECVERSION
from xsm_celery.eda.outbox import PublishSpec, consumed_events, publish_specs
from xsm_celery.engine import Machine
from xsm_celery.errors import ConfigurationError, MissingExtraError

__all__ = [
    "ASYNCAPI_VERSION",
    "CLOUDEVENTS_CONTENT_TYPE",
    "asyncapi_document",
    "load_asyncapi_schema",
    "validate_asyncapi",
]

#: The AsyncAPI version of the generated documents and of the vendored schema.
ASYNCAPI_VERSION = "3.0.0"
#: The content type of every message: a CloudEvents envelope in structured mode.
CLOUDEVENTS_CONTENT_TYPE = "application/cloudevents+json"

_SCHEMA_FILE = "asyncapi-3.0.0.schema.json"
#: AsyncAPI map keys (components, channels, operations) allow only these characters.
_UNSAFE_KEY = re.compile(r"[^\w.\-]")
_INBOUND = "inbound"
_OUTBOUND = "outbound"
_ENVELOPE_SCHEMA = "CloudEventEnvelope"


class _Keys:
    """Legal, unique AsyncAPI map keys for names that may not be (``a/b`` and ``a_b``)."""

    def __init__(self) -> None:
        self._by_name: dict[str, str] = {}
        self._taken: set[str] = set()

    def __call__(self, name: str) -> str:
        """The key of ``name``: the same name always gets the same key."""
        known = self._by_name.get(name)
        if known is not None:
            return known
        base = _UNSAFE_KEY.sub("_", name) or "_"
        key, suffix = base, 1
        while key in self._taken:
            suffix += 1
            key = f"{base}_{suffix}"
        self._by_name[name] = key
        self._taken.add(key)
        return key


def _envelope_schema() -> dict[str, Any]:
    """The CloudEvents 1.0 attributes every message carries, as an AsyncAPI schema."""
    text = {"type": "string"}
    return {
        "type": "object",
        "required": ["specversion", "id", "source", "type", "subject"],
        "properties": {
            "specversion": {"type": "string", "const": SPECVERSION},
            "id": {**text, "description": "Sortable unique id; also the idempotency key."},
            "source": {**text, "description": "The producer; the idempotency principal."},
            "type": text,
            "subject": {**text, "description": "The machine instance key (partition key)."},
            "time": {"type": "string", "format": "date-time"},
            "datacontenttype": text,
            "correlationid": {**text, "description": "Shared by a whole conversation."},
            "causationid": {**text, "description": "The id of the envelope that caused this."},
            "machineid": text,
            "machineversion": text,
            "xsmattempt": {"type": "integer", "minimum": 0},
            "data": {"type": ["object", "null"]},
        },
    }


def _message(event_type: str, summary: str, data: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": event_type,
        "title": event_type,
        "summary": summary,
        "contentType": CLOUDEVENTS_CONTENT_TYPE,
        "payload": {
            "allOf": [
                {"$ref": f"#/components/schemas/{_ENVELOPE_SCHEMA}"},
                {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "const": event_type},
                        "data": dict(data),
                    },
                },
            ]
        },
    }


def _published_data(specs: list[PublishSpec]) -> dict[str, Any]:
    """The ``data`` schema of one published type (the union of its declarations)."""
    if any(spec.fields is None for spec in specs):
        return {"type": "object", "description": "The machine's public context, redacted."}
    fields = sorted({name for spec in specs for name in spec.fields or ()})
    if not fields:
        return {"type": ["object", "null"]}
    return {
        "type": "object",
        "description": "Context fields copied when the event is published.",
        "properties": {name: {} for name in fields},
    }


def _published(machine: Machine) -> dict[str, tuple[str, dict[str, Any]]]:
    """Published type -> (summary, data schema), in declaration order."""
    by_type: dict[str, list[PublishSpec]] = {}
    for spec in publish_specs(machine):
        by_type.setdefault(spec.type, []).append(spec)
    result: dict[str, tuple[str, dict[str, Any]]] = {}
    for event_type, specs in by_type.items():
        sources = ", ".join(sorted({spec.source for spec in specs}))
        summary = f"Published by {machine.id} on a transition or entry of {sources}."
        result[event_type] = (summary, _published_data(specs))
    return result


def _channel(
    address: str, description: str, keys: Iterable[str], bindings: Mapping[str, Any] | None
) -> dict[str, Any]:
    channel: dict[str, Any] = {
        "address": address,
        "description": description,
        "messages": {key: {"$ref": f"#/components/messages/{key}"} for key in keys},
    }
    if bindings:
        channel["bindings"] = dict(bindings)
    return channel


def _operation(action: str, channel: str, key: str, summary: str) -> dict[str, Any]:
    return {
        "action": action,
        "summary": summary,
        "channel": {"$ref": f"#/channels/{channel}"},
        "messages": [{"$ref": f"#/channels/{channel}/messages/{key}"}],
    }


def _check_topic(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{name} must be a non-empty topic or queue name, got {value!r}")
    return value


def asyncapi_document(
    machine: Machine,
    server: Mapping[str, Any] | None = None,
    *,
    inbound_topic: str | None = None,
    outbound_topic: str = "events",
    inbound_bindings: Mapping[str, Any] | None = None,
    outbound_bindings: Mapping[str, Any] | None = None,
    title: str | None = None,
    version: str | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """Return the AsyncAPI 3.0.0 document of the service that runs ``machine``.

    Args:
        machine: The chart; its ``on`` keys are consumed as ``xsm.<machine id>.<EVENT>``
            and its ``publish_specs`` are published.
        server: The broker as an AsyncAPI Server Object, at least ``{"host": ...,
            "protocol": ...}`` (``"localhost:6379"``, ``"redis"``); ``None`` leaves
            ``servers`` out. Passed through as given, so ``validate_asyncapi`` reports
            a missing ``host`` or ``protocol``.
        inbound_topic: Where the consumed events arrive: the dispatcher's topic, or for a
            Celery workflow the queue its event task is routed to. Default: the machine id.
        outbound_topic: The topic the ``OutboxPlugin`` publishes to.
        inbound_bindings / outbound_bindings: AsyncAPI channel bindings, as given, e.g.
            ``{"amqp": {"is": "queue", "queue": {"name": "orders", "durable": True}}}``
            to name the Celery queue on RabbitMQ.
        title / version / description: The ``info`` block; default the machine id, its
            chart ``version`` (or ``"1.0.0"``) and a generated sentence.

    Raises:
        ValueError: A topic is empty, or the chart declares a malformed ``meta.publish``.
    """
    inbound = _check_topic("inbound_topic", machine.id if inbound_topic is None else inbound_topic)
    outbound = _check_topic("outbound_topic", outbound_topic)
    keys = _Keys()
    messages: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    consumed: list[str] = []
    for event in consumed_events(machine):
        event_type = f"xsm.{machine.id}.{event}"
        key = keys(event_type)
        consumed.append(key)
        summary = f"Sends {event} to the {machine.id} instance named by the subject."
        messages[key] = _message(event_type, summary, {"type": ["object", "null"]})
        operations[keys(f"receive.{event_type}")] = _operation("receive", _INBOUND, key, summary)
    published: list[str] = []
    for event_type, (summary, data) in _published(machine).items():
        key = keys(event_type)
        published.append(key)
        messages[key] = _message(event_type, summary, data)
        operations[keys(f"send.{event_type}")] = _operation("send", _OUTBOUND, key, summary)
    channels = {
        _INBOUND: _channel(
            inbound, f"Commands and events {machine.id} consumes.", consumed, inbound_bindings
        ),
        _OUTBOUND: _channel(
            outbound, f"Integration events {machine.id} publishes.", published, outbound_bindings
        ),
    }
    chart_version = getattr(machine, "version", None)
    document: dict[str, Any] = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": title or machine.id,
            "version": version or (str(chart_version) if chart_version is not None else "1.0.0"),
            "description": description
            or f"Events of the {machine.id!r} statechart, generated by xsm_celery.",
        },
        "defaultContentType": CLOUDEVENTS_CONTENT_TYPE,
        "channels": channels,
        "operations": operations,
        "components": {"schemas": {_ENVELOPE_SCHEMA: _envelope_schema()}, "messages": messages},
    }
    if server is not None:
        document["servers"] = {"default": dict(server)}
    return document


@functools.lru_cache(maxsize=1)
def _schema_text() -> str:
    return resources.files("xsm_celery.eda").joinpath("schemas", _SCHEMA_FILE).read_text("utf-8")


def load_asyncapi_schema() -> dict[str, Any]:
    """Return the vendored AsyncAPI 3.0.0 JSON Schema as a new dict (no network)."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    try:
        import jsonschema
    except ImportError as exc:
        raise MissingExtraError(
            "asyncapi",
            "jsonschema",
            hint="validate_asyncapi needs it; generation itself needs nothing",
        ) from exc
    import referencing
    import referencing.exceptions
    import referencing.jsonschema

    missing: Any = referencing.exceptions.NoSuchResource
    registry_class: Any = referencing.Registry

    def offline(uri: str) -> Any:
        """Every $ref resolves inside the vendored schema; nothing is ever fetched."""
        raise missing(ref=uri)

    schema = load_asyncapi_schema()
    resource = referencing.jsonschema.DRAFT7.create_resource(schema)
    registry = registry_class(retrieve=offline).with_resource(schema["$id"], resource)
    return jsonschema.Draft7Validator(schema, registry=registry.crawl())


def validate_asyncapi(document: Mapping[str, Any]) -> None:
    """Check ``document`` against the AsyncAPI 3.0.0 JSON Schema; return None when valid.

    Raises:
        MissingExtraError: ``jsonschema`` is not installed (``pip install
            "xsm-celery[asyncapi]"``).
        jsonschema.ValidationError: The document is not valid AsyncAPI 3.0.0; the most
            relevant error, with its ``json_path`` naming the field to fix.
    """
    validator = _validator()
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(dict(document)))
    if error is None:
        return
    while error.context:
        error = jsonschema.exceptions.best_match(_beyond_reference(error.context))
    raise error


def _beyond_reference(errors: list[Any]) -> list[Any]:
    """The errors of a ``oneOf`` that are about the object itself, not its ``$ref`` form.

    Most AsyncAPI fields accept either a Reference Object or the real object; when the real
    object is wrong, "'$ref' is a required property" is true but useless to the reader.
    """
    real = [e for e in errors if not (e.validator == "required" and "'$ref'" in e.message)]
    return real or errors
