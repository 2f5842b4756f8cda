"""An outbox publish, its relay and the consumer's step are one trace (SDK in-memory exporter)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from xsm_celery import MachineLogic, SyncInterpreter, create_machine, hooks
from xsm_celery.eda import InboundDispatcher, OutboxPlugin, OutboxRelay, SyncFakeBrokerAdapter
from xsm_celery.eda.outbox_store import MemoryOutboxStore
from xsm_celery.metrics.tracing import Tracing
from xsm_celery.persistence import MemoryStore

ORDER = {
    "id": "order",
    "initial": "open",
    "context": {"total": 0},
    "states": {
        "open": {"on": {"PAY": {"target": "paid", "actions": "setTotal",
                                "meta": {"publish": {"type": "order.paid", "data": ["total"]}}}}},
        "paid": {"type": "final"},
    },
}
SHIPPING = {
    "id": "shipping",
    "initial": "waiting",
    "states": {"waiting": {"on": {"order.paid": "packing"}}, "packing": {}},
}


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """An SDK provider with an in-memory exporter, and ``Tracing`` subscribed to it."""
    exporter = InMemorySpanExporter()
    sdk = TracerProvider()
    sdk.add_span_processor(SimpleSpanProcessor(exporter))
    stop = hooks.subscribe(Tracing(sdk).handle)
    try:
        yield sdk, exporter
    finally:
        stop()
        sdk.shutdown()


def test_publish_relay_and_consume_share_one_trace(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """The envelope carries the publishing span; relay and dispatch spans are its children."""
    sdk, exporter = provider
    outbox = MemoryOutboxStore()
    logic = MachineLogic(actions={"setTotal": lambda i, ctx, e, a: ctx.update(total=e.payload["total"])})
    order = create_machine(ORDER, logic=logic)
    with sdk.get_tracer("shop").start_as_current_span("checkout") as checkout:
        interp = SyncInterpreter(order)
        interp.use(OutboxPlugin(outbox, topic="orders"))
        interp.start()
        interp.send("PAY", total=42)
    row = outbox.pending(1)[0]
    trace_id = checkout.get_span_context().trace_id
    assert row.envelope.extensions["traceparent"].split("-")[1] == f"{trace_id:032x}"

    broker = SyncFakeBrokerAdapter()
    assert OutboxRelay(outbox, broker).relay_once_sync() == 1
    dispatcher = InboundDispatcher(MemoryStore(), {"order.paid": create_machine(SHIPPING)})
    assert dispatcher.run_once_sync(broker, "orders").processed == 1

    spans = {s.name: s for s in exporter.get_finished_spans()}
    relay, consume = spans["xsm.outbox.relay orders"], spans["xsm.dispatch shipping"]
    assert relay.context.trace_id == consume.context.trace_id == trace_id
    assert relay.parent.span_id == consume.parent.span_id == checkout.get_span_context().span_id
    assert consume.attributes["xsm.outcome"] == "processed"


def test_without_a_recording_span_nothing_is_added(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """An envelope built outside any span carries no invented trace context."""
    outbox = MemoryOutboxStore()
    logic = MachineLogic(actions={"setTotal": lambda i, ctx, e, a: None})
    interp = SyncInterpreter(create_machine(ORDER, logic=logic))
    interp.use(OutboxPlugin(outbox, topic="orders"))
    interp.start()
    interp.send("PAY", total=1)
    assert "traceparent" not in outbox.pending(1)[0].envelope.extensions
