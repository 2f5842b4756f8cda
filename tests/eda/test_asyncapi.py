"""asyncapi_document and validate_asyncapi: the chart's contract as a valid AsyncAPI 3.0.0 document."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from xsm_celery.eda import (
    ASYNCAPI_VERSION,
    asyncapi_document,
    consumed_events,
    load_asyncapi_schema,
    publish_specs,
    validate_asyncapi,
)
from xsm_celery.eda import asyncapi as asyncapi_module
from xsm_celery.engine import Machine, create_machine
from xsm_celery.errors import MissingExtraError
from xsm_celery.patterns import RetryPolicy, SagaBuilder

SHARED_SCHEMA = (
    Path(__file__).resolve().parents[3] / "shared" / "asyncapi" / "asyncapi-3.0.0.schema.json"
)
SERVER = {"host": "localhost:9092", "protocol": "kafka"}


def order() -> Machine:
    return create_machine(
        {
            "id": "order",
            "initial": "open",
            "context": {"total": 0},
            "states": {
                "open": {
                    "on": {
                        "PAY": {
                            "target": "paid",
                            "meta": {"publish": {"type": "order.paid", "data": ["total"]}},
                        },
                        "CANCEL": {"target": "cancelled", "meta": {"publish": "order.cancelled"}},
                    }
                },
                "paid": {"type": "final"},
                "cancelled": {"type": "final", "tags": ["publish"]},
            },
        }
    )


@pytest.fixture(autouse=True)
def fresh_validator() -> Any:
    """Each test builds its own validator, so a test that hides jsonschema sees it missing."""
    asyncapi_module._validator.cache_clear()
    yield
    asyncapi_module._validator.cache_clear()


def test_the_version_constant_is_the_schema_s_version() -> None:
    """ASYNCAPI_VERSION is 3.0.0, the only value the vendored schema accepts."""
    assert ASYNCAPI_VERSION == "3.0.0"
    assert load_asyncapi_schema()["properties"]["asyncapi"]["const"] == ASYNCAPI_VERSION


def test_the_vendored_schema_is_the_official_file_unchanged() -> None:
    """The package data is byte-for-byte the published schema, with its licence beside it."""
    from importlib.resources import files

    folder = files("xsm_celery.eda") / "schemas"
    shipped = (folder / "asyncapi-3.0.0.schema.json").read_bytes()
    assert shipped == SHARED_SCHEMA.read_bytes()
    assert "Apache License" in (folder / "LICENSE").read_text(encoding="utf-8")
    assert "7dd3990d9fff9df76e81c8d2ab544e0000f29aff" in (folder / "README.md").read_text("utf-8")


def test_load_asyncapi_schema_returns_a_fresh_dict() -> None:
    """A caller that edits the returned schema cannot change the next one."""
    first = load_asyncapi_schema()
    first["properties"].clear()
    assert load_asyncapi_schema()["properties"]["asyncapi"]["const"] == "3.0.0"


def test_document_lists_consumed_and_published_events() -> None:
    """on keys are consumed as xsm.<machine>.<EVENT>; publish_specs are published."""
    doc = asyncapi_document(order(), SERVER, inbound_topic="orders", outbound_topic="order-events")
    assert doc["asyncapi"] == "3.0.0"
    assert doc["servers"] == {"default": SERVER}
    inbound, outbound = doc["channels"]["inbound"], doc["channels"]["outbound"]
    assert inbound["address"] == "orders"
    assert outbound["address"] == "order-events"
    assert set(inbound["messages"]) == {"xsm.order.PAY", "xsm.order.CANCEL"}
    assert set(outbound["messages"]) == {
        "order.paid",
        "order.cancelled",
        "xsm.order.transition.cancelled",
    }
    actions = {key: op["action"] for key, op in doc["operations"].items()}
    assert actions["receive.xsm.order.PAY"] == "receive"
    assert actions["send.order.paid"] == "send"
    validate_asyncapi(doc)


def test_messages_are_cloudevents_with_the_declared_data() -> None:
    """Each message is a structured CloudEvent whose type is fixed and data lists the fields."""
    doc = asyncapi_document(order(), SERVER)
    paid = doc["components"]["messages"]["order.paid"]
    assert paid["contentType"] == "application/cloudevents+json"
    envelope_ref, specific = paid["payload"]["allOf"]
    assert envelope_ref == {"$ref": "#/components/schemas/CloudEventEnvelope"}
    assert specific["properties"]["type"] == {"type": "string", "const": "order.paid"}
    assert set(specific["properties"]["data"]["properties"]) == {"total"}
    whole = doc["components"]["messages"]["xsm.order.transition.cancelled"]
    assert "public context" in whole["payload"]["allOf"][1]["properties"]["data"]["description"]
    envelope = doc["components"]["schemas"]["CloudEventEnvelope"]
    assert {"specversion", "id", "source", "type", "subject"} <= set(envelope["required"])


def test_the_document_is_json_and_valid_without_a_server() -> None:
    """No server= leaves servers out; the document round-trips through JSON and validates."""
    doc = asyncapi_document(order())
    assert "servers" not in doc
    assert doc["channels"]["inbound"]["address"] == "order"
    assert json.loads(json.dumps(doc)) == doc
    validate_asyncapi(doc)


def test_a_saga_document_consumes_start_only_and_publishes_its_step_events() -> None:
    """Engine events never appear as consumable; every step's integration event is published."""
    saga = (
        SagaBuilder("fulfil", start_event="START")
        .step(
            "reserve",
            invoke="r",
            compensate="u",
            timeout_ms=5000,
            retry=RetryPolicy(max_attempts=2),
        )
        .step("charge", invoke="c")
    )
    doc = asyncapi_document(create_machine(saga.build()), SERVER)
    assert list(doc["channels"]["inbound"]["messages"]) == ["xsm.fulfil.START"]
    published = set(doc["channels"]["outbound"]["messages"])
    assert {
        "fulfil.reserve.completed",
        "fulfil.reserve.failed",
        "fulfil.reserve.retrying",
        "fulfil.reserve.compensated",
        "fulfil.charge.completed",
    } <= published
    validate_asyncapi(doc)


def test_a_workflow_names_its_celery_queue_with_channel_bindings() -> None:
    """inbound_topic plus amqp bindings describe the queue a workflow's events arrive on."""
    bindings = {"amqp": {"is": "queue", "queue": {"name": "orders", "durable": True}}}
    doc = asyncapi_document(
        order(),
        {"host": "localhost:5672", "protocol": "amqp"},
        inbound_topic="orders",
        inbound_bindings=bindings,
    )
    assert doc["channels"]["inbound"]["bindings"] == bindings
    assert doc["channels"]["inbound"]["address"] == "orders"
    validate_asyncapi(doc)


def test_types_with_characters_asyncapi_keys_refuse_are_made_safe() -> None:
    """A publish type like 'billing/invoice:paid' keeps its name but gets a legal key."""
    machine = create_machine(
        {
            "id": "bill",
            "initial": "a",
            "states": {
                "a": {"on": {"GO": {"target": "b", "meta": {"publish": "billing/invoice:paid"}}}},
                "b": {"type": "final"},
            },
        }
    )
    doc = asyncapi_document(machine, SERVER)
    message = doc["components"]["messages"]["billing_invoice_paid"]
    assert message["name"] == "billing/invoice:paid"
    validate_asyncapi(doc)


def test_info_defaults_and_overrides() -> None:
    """info carries the chart version by default, and title/version/description when given."""
    versioned = create_machine({"id": "v", "version": "2.1", "initial": "a", "states": {"a": {}}})
    assert asyncapi_document(versioned)["info"]["version"] == "2.1"
    doc = asyncapi_document(order(), title="Orders", version="9.9.9", description="Order API")
    assert doc["info"] == {"title": "Orders", "version": "9.9.9", "description": "Order API"}


@pytest.mark.parametrize("option", ["inbound_topic", "outbound_topic"])
def test_an_empty_topic_is_refused(option: str) -> None:
    """An empty topic name is a ValueError naming the option."""
    with pytest.raises(ValueError, match=f"{option} must be a non-empty topic"):
        asyncapi_document(order(), **{option: " "})


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({"host": "localhost:9092"}, "'protocol' is a required property"),
        ({"protocol": "kafka"}, "'host' is a required property"),
        ({"host": "h", "protocol": 5}, "5 is not of type 'string'"),
    ],
)
def test_a_server_missing_host_or_protocol_fails_validation(
    server: dict[str, Any], message: str
) -> None:
    """The table's row: a server= dict missing a field raises jsonschema.ValidationError naming it."""
    doc = asyncapi_document(order(), server)
    with pytest.raises(jsonschema.ValidationError) as caught:
        validate_asyncapi(doc)
    assert caught.value.message == message
    assert caught.value.json_path.startswith("$.servers.default")


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda d: d.update(asyncapi="2.6.0"), "$.asyncapi"),
        (lambda d: d["info"].pop("version"), "$.info"),
        (lambda d: d["operations"]["send.order.paid"].update(action="publish"), "$.operations"),
        (lambda d: d.update(unknown=1), "$"),
    ],
)
def test_a_hand_edited_document_fails_validation(edit: Any, path: str) -> None:
    """A broken document raises jsonschema.ValidationError whose path points at the field."""
    doc = asyncapi_document(order(), SERVER)
    edit(doc)
    with pytest.raises(jsonschema.ValidationError) as caught:
        validate_asyncapi(doc)
    assert caught.value.json_path.startswith(path)


def test_validation_never_touches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every socket refused, validation (including a remote $ref in the data) still works."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("validate_asyncapi opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    doc = asyncapi_document(order(), SERVER)
    doc["channels"]["inbound"]["messages"]["remote"] = {"$ref": "http://example.invalid/m.json"}
    validate_asyncapi(doc)


def test_validation_without_jsonschema_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without jsonschema, validate_asyncapi raises MissingExtraError naming the asyncapi extra."""
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    doc = asyncapi_document(order(), SERVER)
    with pytest.raises(MissingExtraError, match=r"'jsonschema' is not installed") as caught:
        validate_asyncapi(doc)
    assert caught.value.extra == "asyncapi"
    assert 'pip install "xsm-celery[asyncapi]"' in str(caught.value)
    assert isinstance(caught.value, ImportError)


def test_generation_needs_no_third_party_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncapi_document and load_asyncapi_schema work with jsonschema absent."""
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    monkeypatch.setitem(sys.modules, "referencing", None)
    assert asyncapi_document(order(), SERVER)["asyncapi"] == "3.0.0"
    assert load_asyncapi_schema()["$id"].endswith("asyncapi.json")


def test_consumed_events_and_publish_specs_feed_the_document() -> None:
    """consumed_events lists sendable events sorted; publish_specs every declaration."""
    machine = order()
    assert consumed_events(machine) == ["CANCEL", "PAY"]
    assert [spec.type for spec in publish_specs(machine)] == [
        "order.paid",
        "order.cancelled",
        "xsm.order.transition.cancelled",
    ]


def test_types_that_sanitise_to_the_same_key_stay_apart() -> None:
    """'a/b' and 'a_b' get different keys, so neither message hides the other."""
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {
                    "on": {
                        "X": {"target": "b", "meta": {"publish": "a/b"}},
                        "Y": {"target": "b", "meta": {"publish": "a_b"}},
                    }
                },
                "b": {"type": "final"},
            },
        }
    )
    doc = asyncapi_document(machine, SERVER)
    names = {m["name"] for m in doc["components"]["messages"].values()}
    assert {"a/b", "a_b"} <= names
    assert len(doc["channels"]["outbound"]["messages"]) == 2
    validate_asyncapi(doc)
