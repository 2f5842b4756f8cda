"""A secret argument echoed in an exception message is masked wherever the message goes."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from celery import Celery

from xsm_celery.celery import HEADER, ChartTask
from xsm_celery.celery.task.secrets import mask_context_errors
from xsm_celery.eda import Envelope, InboundDispatcher, MemoryDeadLetterStore
from xsm_celery.engine.redact import mask_text
from xsm_celery.patterns import ERRORS_CONTEXT_KEY, DeadLetter, RetryPolicy
from xsm_celery.patterns.dead_letter.redaction import redact_record
from xsm_celery.persistence import MemoryStore
from xsm_celery.sqlalchemy.urls import open_dead_letter_store

SECRET = "hunter2-very-secret"


@pytest.fixture
def app() -> Celery:
    """An eager app with its own memory dead-letter store."""
    celery_app = Celery("secrets", set_as_current=False)
    celery_app.conf.update(
        task_always_eager=True, xsm_dead_letter_store=f"memory://{uuid.uuid4().hex}"
    )
    return celery_app


def test_a_secret_argument_is_masked_in_the_header_the_record_the_result_and_the_logs(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    """``raise ValueError(f"bad key {api_key}")``: the key is masked in every copy of the text."""
    headers_seen: list[Any] = []

    @app.task(
        bind=True,
        shared=False,
        base=ChartTask,
        retry_policy=RetryPolicy(max_attempts=2, base_ms=1, jitter="none"),
    )
    def charge(self: Any, order_id: str, api_key: str) -> None:
        headers_seen.append((self.request.headers or {}).get(HEADER))
        raise ConnectionError(f"bad key {api_key} for {order_id}")

    with caplog.at_level(logging.DEBUG):
        result = charge.apply(("o-1", SECRET))
    assert result.state == "FAILURE"
    assert SECRET not in str(result.result)
    assert "bad key *** for o-1" in str(result.result)
    (header,) = [h for h in headers_seen if h]
    assert SECRET not in header
    chain = json.loads(header)["context"][ERRORS_CONTEXT_KEY]
    assert chain[0]["message"] == "bad key *** for o-1"
    (record,) = open_dead_letter_store(app.conf.xsm_dead_letter_store).all()
    assert SECRET not in record.to_json()
    assert [e["message"] for e in record.errors] == ["bad key *** for o-1"] * 2
    assert SECRET not in caplog.text


def test_a_store_masks_values_of_secret_keys_inside_messages() -> None:
    """Every store's redaction masks a secret key's value where an error message repeats it."""
    record = DeadLetter(
        machine_id="m",
        state_id="s",
        event={"type": "E", "payload": {"password": SECRET}},
        attempts=1,
        taken_at=0.0,
        snapshot={},
        errors=[{"source": "x", "name": "x", "type": "ValueError", "message": f"pw {SECRET}"}],
    )
    assert redact_record(record).errors[0]["message"] == "pw ***"


@pytest.mark.parametrize(
    "token",
    [
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "xoxb-123456789012-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "Bearer abcdefghijklmnop",
        "password=s3cr3tvalue",
    ],
)
def test_well_known_token_shapes_are_masked_anywhere(token: str) -> None:
    """Tokens recognisable by their shape are masked even without a secret key."""
    assert token not in mask_text(f"upstream said: {token} (retry)")


def test_the_header_masks_only_the_error_chain() -> None:
    """``mask_context_errors`` changes the error messages and nothing else in the context."""
    context = {
        "attempt": 1,
        "note": f"kept {SECRET}",
        ERRORS_CONTEXT_KEY: [{"message": f"no {SECRET}"}],
    }
    mask_context_errors(context, [SECRET])
    assert context[ERRORS_CONTEXT_KEY] == [{"message": "no ***"}]
    assert context["attempt"] == 1
    assert context["note"] == f"kept {SECRET}"


def test_the_dispatcher_masks_envelope_secrets_in_its_logs_and_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An envelope's secret field echoed by a failing step is masked in the log and the record."""
    from xsm_celery import MachineLogic, create_machine

    def explode(i: Any, ctx: Any, e: Any, a: Any) -> None:
        raise RuntimeError(f"token {e.payload['token']} rejected")

    machine = create_machine(
        {"id": "m", "initial": "a", "states": {"a": {"on": {"GO": {"actions": "explode"}}}}},
        logic=MachineLogic(actions={"explode": explode}),
    )
    dlq = MemoryDeadLetterStore()
    dispatcher = InboundDispatcher(
        MemoryStore(), {"xsm.m.GO": machine}, dead_letters=dlq, max_attempts=1
    )
    with caplog.at_level(logging.INFO):
        dispatcher.handle(Envelope.new(type="xsm.m.GO", subject="s", data={"token": SECRET}))
    assert SECRET not in caplog.text
    (record,) = dlq.all()
    assert SECRET not in record.to_json()
