"""The AsyncAPI 3.0.0 document of a workflow: the Celery task message its worker accepts.

A workflow's events do not travel as CloudEvents: ``Workflow.send`` publishes the Celery task
``xsm.workflow.<name>(key, message)`` on the workflow's queue, and a worker takes nothing
else from it. So the document describes that message, in Celery's task protocol 2, closely
enough for a producer in another language to publish it without Celery:

* the message headers (``task``, ``id``, ``lang``, ``retries``, ... as AMQP headers);
* the body, JSON ``[args, kwargs, embed]`` with ``args = [key, {"id", "kind": "event",
  "type", "payload"}]``, ``kwargs = {}`` and ``embed`` the (empty) callbacks;
* content type ``application/json``, encoding ``utf-8``, ``correlation_id`` the task id;
* the channel: the queue, reached through the default (nameless) exchange with the queue
  name as routing key.

The integration events the workflow publishes through its outbox are CloudEvents and keep the
chart document's description (``xsm_celery.eda.asyncapi.asyncapi_document``, which also stays
the document of a chart run by the dispatcher).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xsm_celery.celery.workflow.checks import MAX_EVENT_ID_LENGTH
from xsm_celery.eda.asyncapi import ASYNCAPI_VERSION, asyncapi_document
from xsm_celery.eda.outbox import consumed_events
from xsm_celery.persistence.memory import MAX_KEY_LENGTH

__all__ = ["TASK_CONTENT_TYPE", "TASK_HEADERS_SCHEMA", "workflow_asyncapi"]

#: The content type of a Celery task message with the JSON serializer.
TASK_CONTENT_TYPE = "application/json"
#: The component name of the task-protocol-2 headers schema.
TASK_HEADERS_SCHEMA = "CeleryTaskHeaders"

_STEPS = "steps"
_NULLABLE_TEXT = {"type": ["string", "null"]}


def _headers_schema() -> dict[str, Any]:
    """Celery's task protocol 2 headers, as a worker reads them."""
    return {
        "type": "object",
        "description": "Celery task protocol 2 headers (AMQP message headers).",
        "required": ["lang", "task", "id", "root_id", "parent_id", "group"],
        "properties": {
            "lang": {"type": "string", "const": "py"},
            "task": {"type": "string", "description": "The task name."},
            "id": {
                "type": "string",
                "minLength": 1,
                "description": "A new unique task id (a UUID); also the correlation_id.",
            },
            "root_id": {"type": "string", "description": "The id of the first task; id."},
            "parent_id": _NULLABLE_TEXT,
            "group": _NULLABLE_TEXT,
            "shadow": _NULLABLE_TEXT,
            "eta": {**_NULLABLE_TEXT, "description": "ISO 8601 time to run at, or null."},
            "expires": _NULLABLE_TEXT,
            "retries": {"type": "integer", "minimum": 0, "default": 0},
            "timelimit": {
                "type": "array",
                "items": {"type": ["number", "null"]},
                "minItems": 2,
                "maxItems": 2,
                "default": [None, None],
            },
            "argsrepr": {"type": "string"},
            "kwargsrepr": {"type": "string"},
            "origin": {"type": "string", "description": "The producer, e.g. pid@host."},
            "ignore_result": {"type": "boolean"},
        },
    }


def _body_schema(name: str, event: str) -> dict[str, Any]:
    """``[args, kwargs, embed]`` of the step task for ``event``."""
    key_room = MAX_KEY_LENGTH - len(name) - 1
    message = {
        "type": "object",
        "required": ["id", "kind", "type"],
        "additionalProperties": False,
        "properties": {
            "id": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_EVENT_ID_LENGTH,
                "description": "The event id the inbox deduplicates on: resend it, it runs once.",
            },
            "kind": {"type": "string", "const": "event"},
            "type": {"type": "string", "const": event},
            "payload": {"type": "object", "description": "The event's data (event.payload)."},
        },
    }
    args = {
        "type": "array",
        "items": [
            {
                "type": "string",
                "minLength": 1,
                "maxLength": key_room,
                "description": "The instance key; an unknown key starts a new instance.",
            },
            message,
        ],
        "minItems": 2,
        "maxItems": 2,
    }
    embed = {
        "type": "object",
        "properties": {
            part: {"type": "null"} for part in ("callbacks", "errbacks", "chain", "chord")
        },
    }
    return {
        "type": "array",
        "description": "Celery task protocol 2 body: [args, kwargs, embed], JSON.",
        "items": [args, {"type": "object", "maxProperties": 0}, embed],
        "minItems": 3,
        "maxItems": 3,
    }


def _example(task: str, event: str) -> dict[str, Any]:
    task_id = "3b1f6f0e-5c4e-4d8e-9a37-0c2f1d1f9a10"
    return {
        "name": f"{event}-example",
        "headers": {
            "lang": "py",
            "task": task,
            "id": task_id,
            "root_id": task_id,
            "parent_id": None,
            "group": None,
            "retries": 0,
            "timelimit": [None, None],
        },
        "payload": [
            ["o-42", {"id": "evt-0001", "kind": "event", "type": event, "payload": {}}],
            {},
            {"callbacks": None, "errbacks": None, "chain": None, "chord": None},
        ],
    }


def _message(name: str, task: str, event: str) -> dict[str, Any]:
    return {
        "name": event,
        "title": f"{event} for workflow {name}",
        "summary": f"Sends {event} to the {name} instance named by the key: task {task}.",
        "contentType": TASK_CONTENT_TYPE,
        "headers": {
            "allOf": [
                {"$ref": f"#/components/schemas/{TASK_HEADERS_SCHEMA}"},
                {"type": "object", "properties": {"task": {"type": "string", "const": task}}},
            ]
        },
        "payload": _body_schema(name, event),
        "correlationId": {
            "description": "The task id (AMQP property correlation_id).",
            "location": "$message.header#/id",
        },
        "bindings": {"amqp": {"contentEncoding": "utf-8", "messageType": task}},
        "examples": [_example(task, event)],
    }


def workflow_asyncapi(
    workflow: Any, server: Mapping[str, Any] | None = None, **options: Any
) -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document of ``workflow``: its step-task messages and publications.

    Args:
        workflow: A ``Workflow`` (its ``name``, ``machine``, ``queue``, ``app``,
            ``outbox_topic``).
        server: The broker as an AsyncAPI Server Object (``{"host": ..., "protocol": ...}``).
        options: ``asyncapi_document``'s ``outbound_topic``, ``title``, ``version`` and
            ``description``.
    """
    name = str(workflow.name)
    task = f"xsm.workflow.{name}"
    queue = workflow.queue or str(workflow.app.conf.task_default_queue or "celery")
    if getattr(workflow, "outbox_topic", None):
        options.setdefault("outbound_topic", workflow.outbox_topic)
    options.setdefault("description", f"Messages of the {name!r} workflow, by xsm_celery.")
    options.setdefault("title", f"{name} workflow")
    document = asyncapi_document(workflow.machine, server, **options)
    messages: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for event in consumed_events(workflow.machine):
        key = f"step.{event}"
        messages[key] = _message(name, task, event)
        operations[f"receive.{key}"] = {
            "action": "receive",
            "summary": f"A worker runs one step of {name} for {event}.",
            "channel": {"$ref": f"#/channels/{_STEPS}"},
            "messages": [{"$ref": f"#/channels/{_STEPS}/messages/{key}"}],
        }
    steps = {
        "address": queue,
        "description": (
            f"The Celery queue of workflow {name}: publish to the default (nameless) exchange "
            f"with routing key {queue!r}, body JSON, content_type {TASK_CONTENT_TYPE}, "
            "content_encoding utf-8, the headers as message headers and correlation_id the "
            "task id. On Redis, kombu's transport carries the same message as a JSON object "
            "(body base64-encoded, headers, properties with body_encoding 'base64' and "
            "delivery_info) pushed on the list named like the queue."
        ),
        "messages": {key: {"$ref": f"#/components/messages/{key}"} for key in messages},
        "bindings": {"amqp": {"is": "queue", "queue": {"name": queue, "durable": True}}},
    }
    chart_inbound = document["channels"].pop("inbound")
    for ref in chart_inbound["messages"].values():
        document["components"]["messages"].pop(ref["$ref"].rsplit("/", 1)[1], None)
    document["operations"] = {
        **operations,
        **{k: v for k, v in document["operations"].items() if v["action"] == "send"},
    }
    document["channels"] = {_STEPS: steps, **document["channels"]}
    document["components"]["messages"].update(messages)
    document["components"]["schemas"][TASK_HEADERS_SCHEMA] = _headers_schema()
    document["defaultContentType"] = TASK_CONTENT_TYPE
    document["asyncapi"] = ASYNCAPI_VERSION
    return document
