"""A workflow on a real worker: ``-E`` turns on the xsm-* events, and the AsyncAPI document
describes the Celery task message the worker takes, well enough to publish it with kombu."""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from celery import Celery
from kombu import Connection

from tests import services
from tests.celery.test_workflow_workers import _workflows
from tests.celery.workers import BACKEND_DB, BROKER_DB, Cluster, wait_for
from tests.metrics.test_worker import Events
from xsm_celery.eda.asyncapi import validate_asyncapi
from xsm_celery.metrics.events import events_wanted

APP = "tests.celery.workflow_workerapp"


def _with_db(url: str, db: int) -> str:
    return f"{url.rstrip('/').rsplit('/', 1)[0]}/{db}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One prefork worker started with ``-E`` (the app sets no xsm_send_events)."""
    services.require("redis")
    workdir: Path = tmp_path_factory.mktemp("wf-events")
    store = f"sqlite:///{workdir / 'workflows.db'}"
    group = Cluster(
        broker=_with_db(services.REDIS_URL, BROKER_DB),
        backend=_with_db(services.REDIS_URL, BACKEND_DB),
        workdir=workdir,
        app=APP,
        extra_env={"XSM_TEST_WORKFLOW_STORE": store, "XSM_TEST_TAG": uuid.uuid4().hex[:8]},
    )
    group.extra_env["XSM_TEST_STORE_URL"] = store
    try:
        group.start_worker("events", "prefork", "-E")
        yield group
    finally:
        for proc in list(group.procs):
            group.stop(proc, signal.SIGKILL)
        group.close()


@pytest.fixture
def producer(cluster: Cluster) -> Iterator[Celery]:
    """The test's side of the app: the same workflows over the worker's store."""
    app = cluster.producer()
    app.conf.xsm_workflow_store = cluster.extra_env["XSM_TEST_STORE_URL"]
    yield app
    app.close()


@pytest.mark.slow
def test_a_worker_started_with_E_sends_the_transition_event(
    cluster: Cluster, producer: Celery
) -> None:
    """-E alone: the step's transition arrives as xsm-workflow-transition with from/to."""
    orders = _workflows(producer)["orders"]
    key = f"ev-{uuid.uuid4().hex[:8]}"
    with Events(producer) as events:
        orders.send(key, "PAY", total=5)

        def transition() -> list[dict[str, Any]]:
            return [
                e
                for e in events.seen
                if e["type"] == "xsm-workflow-transition" and e.get("to_state") == "charging"
            ]

        [event] = wait_for(transition, 30, "the created -> charging event")
    assert event["workflow"] == "orders"
    assert event["from_state"] == "created"
    assert event["event"] == "PAY"
    assert event["hostname"].startswith("events.")


def _check(value: Any, document: dict[str, Any], schema: dict[str, Any]) -> None:
    """Validate ``value`` against a schema of the document (AsyncAPI schemas are draft 07),
    with the document's components beside it, so its ``#/components`` refs resolve."""
    root = {**schema, "components": document["components"]}
    jsonschema.Draft7Validator(root).validate(value)


def _message_from(document: dict[str, Any], event: str, key: str) -> dict[str, Any]:
    """Headers, body and properties of ``event`` for ``key``, built from the document alone."""
    message = document["components"]["messages"][f"step.{event}"]
    headers_schema = document["components"]["schemas"]["CeleryTaskHeaders"]
    [_, task_part] = message["headers"]["allOf"]
    task_id = str(uuid.uuid4())
    headers: dict[str, Any] = {"task": task_part["properties"]["task"]["const"], "id": task_id}
    for name in headers_schema["required"]:
        if name not in headers:
            spec = headers_schema["properties"][name]
            headers[name] = spec.get("const", task_id if name == "root_id" else None)
    args_schema, _, embed_schema = message["payload"]["items"]
    event_message = {"id": f"evt-{uuid.uuid4().hex}", "kind": "event", "type": event}
    body = [[key, event_message], {}, dict.fromkeys(embed_schema["properties"])]
    _check(headers, document, message["headers"])
    _check(body, document, message["payload"])
    assert args_schema["items"][1]["properties"]["type"]["const"] == event
    return {
        "headers": headers,
        "body": json.dumps(body),
        "content_type": message["contentType"],
        "content_encoding": message["bindings"]["amqp"]["contentEncoding"],
        "correlation_id": task_id,
    }


def test_the_workflow_document_is_valid_asyncapi_and_names_the_task() -> None:
    """The document validates; each event is the step task's message on the queue."""
    app = Celery(f"wf-doc-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.update(task_default_queue="orders-in", xsm_workflow_store="memory://wf-doc")
    orders = _workflows(app)["orders"]
    document = orders.asyncapi({"host": "localhost:6379", "protocol": "redis"})
    validate_asyncapi(document)
    assert document["channels"]["steps"]["address"] == "orders-in"
    assert sorted(document["components"]["messages"]) == [
        "order.pay_received",
        *(f"step.{e}" for e in ("BOOM", "CANCEL", "CRASH", "NOTE", "PAY", "RETRY", "SHIP", "SLOW")),
    ]
    note = document["components"]["messages"]["step.NOTE"]
    assert note["contentType"] == "application/json"
    assert note["headers"]["allOf"][1]["properties"]["task"]["const"] == "xsm.workflow.orders"
    example = note["examples"][0]
    _check(example["payload"], document, note["payload"])
    _check(example["headers"], document, note["headers"])
    bad = [example["payload"][0], {}, {}]
    bad[0] = [example["payload"][0][0], {"id": "x", "kind": "event", "type": "PAY"}]
    with pytest.raises(jsonschema.ValidationError):
        _check(bad, document, note["payload"])


@pytest.mark.slow
def test_a_message_built_from_the_document_reaches_the_workflow(
    cluster: Cluster, producer: Celery
) -> None:
    """Published with plain kombu (no Celery), the NOTE message is applied to the instance."""
    orders = _workflows(producer)["orders"]
    document = orders.asyncapi()
    key = f"wire-{uuid.uuid4().hex[:8]}"
    built = _message_from(document, "NOTE", key)
    queue = document["channels"]["steps"]["address"]
    with Connection(cluster.broker) as conn:
        conn.Producer().publish(
            built.pop("body"), exchange="", routing_key=queue, retry=True, **built
        )

    def applied() -> bool:
        view = orders.get(key)
        return view is not None and view.context["events"] == 1

    wait_for(applied, 30, "the NOTE published from the document to be applied")
    view = orders.get(key)
    assert view is not None
    assert view.value == "created"


def test_xsm_send_events_overrides_the_task_events_switch() -> None:
    """Unset, the xsm events follow worker_send_task_events; True or False forces them."""
    app = Celery(f"events-switch-{uuid.uuid4().hex[:6]}", set_as_current=False)
    assert events_wanted(app) is False
    app.conf.worker_send_task_events = True
    assert events_wanted(app) is True
    app.conf.xsm_send_events = False
    assert events_wanted(app) is False
    app.conf.worker_send_task_events = False
    app.conf.xsm_send_events = True
    assert events_wanted(app) is True
