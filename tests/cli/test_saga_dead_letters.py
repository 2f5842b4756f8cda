"""The Operations row "stuck compensations": a saga's compensationFailed is listed by xsm dlq."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.conftest import Invoke
from xsm_celery.eda import DeadLetterPlugin, Envelope, InboundDispatcher, SyncFakeBrokerAdapter
from xsm_celery.engine import MachineLogic, create_machine
from xsm_celery.patterns import SagaBuilder
from xsm_celery.persistence import MemoryInbox, MemoryStore
from xsm_celery.sqlalchemy import SQLAlchemyDeadLetterStore


def test_a_stuck_compensation_is_listed_with_its_state_id(invoke: Invoke, tmp_path: Path) -> None:
    """dlq list --json shows the saga's record, its state_id ending .compensationFailed."""
    url = f"sqlite:///{tmp_path / 'dlq.db'}"
    store = SQLAlchemyDeadLetterStore(url)

    def fail(message: str) -> Any:
        def run(interp: Any, ctx: Any, event: Any) -> None:
            raise RuntimeError(message)

        return run

    saga = (
        SagaBuilder("fulfil", start_event="START")
        .step("reserve", invoke="reserveStock", compensate="releaseStock")
        .step("charge", invoke="chargeCard")
    )
    services = {
        "reserveStock": lambda i, c, e: "held",
        "chargeCard": fail("card declined"),
        "releaseStock": fail("warehouse API down"),
    }
    machine = create_machine(
        saga.build(), logic=saga.logic().merge(MachineLogic(services=services))
    )
    dispatcher = InboundDispatcher(
        MemoryStore(),
        {"xsm.fulfil.START": machine},
        inbox=MemoryInbox(),
        plugins=[DeadLetterPlugin(store)],
        dead_letters=store,
    )
    bus = SyncFakeBrokerAdapter()
    bus.publish("commands", Envelope.new(type="xsm.fulfil.START", subject="o-42"))
    assert dispatcher.run_once_sync(bus, "commands").processed == 1
    store.close()
    result = invoke("dlq", "--dlq", url, "list", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["count"] == 1
    [record] = data["dead_letters"]
    assert record["state_id"].endswith(".compensationFailed")
    assert record["reason"] == "dead_letter_state"
    assert [e["message"] for e in record["errors"]] == ["card declined", "warehouse API down"]
