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
        "open": {
            "on": {
                "PAY": {
                    "target": "paid",
                    "actions": "setTotal",
                    "meta": {"publish": {"type": "order.paid", "data": ["total"]}},
                }
            }
        },
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
    logic = MachineLogic(
        actions={"setTotal": lambda i, ctx, e, a: ctx.update(total=e.payload["total"])}
    )
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


def test_a_workflow_step_span_continues_its_events_trace(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """A WORKFLOW_STEP fact becomes a span parented on the event's traceparent, with its timing."""
    sdk, exporter = provider
    with sdk.get_tracer("shop").start_as_current_span("send event") as sender:
        carrier: dict[str, str] = {}
        hooks.emit(hooks.FactKind.OUTBOUND, carrier=carrier)
    hooks.emit(
        hooks.FactKind.WORKFLOW_STEP,
        workflow="checkout",
        event="PAID",
        outcome="processed",
        attempt=1,
        traceparent=carrier["traceparent"],
        duration_s=0.25,
    )
    [step] = [s for s in exporter.get_finished_spans() if s.name == "xsm.workflow checkout"]
    assert step.parent.span_id == sender.get_span_context().span_id
    assert step.attributes["xsm.event"] == "PAID"
    assert (step.end_time - step.start_time) == pytest.approx(0.25e9, rel=0.01)


def test_task_messages_carry_and_continue_the_trace(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """A task published inside a span carries it; the task run continues it until it ends."""
    from types import SimpleNamespace

    from opentelemetry import trace

    from xsm_celery.metrics import worker as observability

    sdk, _ = provider
    headers: dict[str, str] = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    observability._inject_headers(headers=headers)
    assert headers["traceparent"].startswith("00-1111")
    fresh: dict[str, str] = {}
    with sdk.get_tracer("shop").start_as_current_span("publish") as publish:
        observability._inject_headers(headers=fresh)
    trace_id = publish.get_span_context().trace_id
    assert fresh["traceparent"].split("-")[1] == f"{trace_id:032x}"
    task = SimpleNamespace(request=SimpleNamespace(headers=fresh))
    observability._continue_trace(task_id="t-1", task=task)
    assert trace.get_current_span().get_span_context().trace_id == trace_id
    observability._end_trace(task_id="t-1")
    assert not trace.get_current_span().get_span_context().is_valid
