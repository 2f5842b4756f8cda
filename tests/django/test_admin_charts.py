"""The dead-letter page finds the chart of every record that has one, as the instance page does.

A saga's ``compensationFailed`` record, a workflow step message's record and a task's record
each show their chart with the state marked; the saga's instance page draws the same chart
through the same resolver (``xsm_celery.django.charts.resolve_chart``).
"""

from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest
from celery import Celery
from django.test import Client

from tests.celery.workflow_charts import order_machine
from tests.contract_dead_letters import make_record
from xsm_celery.celery import Workflow, Xsm
from xsm_celery.django.charts import find_chart, resolve_chart
from xsm_celery.django.models import DeadLetterRecord, WorkflowInstance
from xsm_celery.django.stores import DjangoDeadLetterStore

SVG = "{http://www.w3.org/2000/svg}"
NO_CHART = "No chart found"


@pytest.fixture
def app() -> Iterator[Celery]:
    """An app on the in-memory broker whose dead letters go to the Django store."""
    celery = Celery(f"charts-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    celery.conf.xsm_dead_letter_store = DjangoDeadLetterStore()
    yield celery
    celery.close()


def checkout_saga(app: Celery) -> Workflow:
    """A four-step ``checkout`` saga whose steps are Celery tasks (never run here)."""
    from xsm_celery.celery import celery_service
    from xsm_celery.engine import MachineLogic, create_machine
    from xsm_celery.patterns import SagaBuilder

    saga = (
        SagaBuilder("checkout", start_event="START")
        .step("reserve", invoke="reserveStock", compensate="releaseStock", timeout_ms=30_000)
        .step("charge", invoke="chargeCard", compensate="refundCard", timeout_ms=10_000)
        .step("ship", invoke="shipOrder", compensate="cancelShipment")
        .step("notify", invoke="notifyCustomer")
    )
    names = [
        "reserveStock",
        "releaseStock",
        "chargeCard",
        "refundCard",
        "shipOrder",
        "cancelShipment",
        "notifyCustomer",
    ]
    services = {name: celery_service(f"shop.{name}") for name in names}
    machine = create_machine(
        saga.build(), logic=saga.logic().merge(MachineLogic(services=services))
    )
    flow: Workflow = Xsm(app).workflow(
        machine, store="django", name=f"checkout_{uuid.uuid4().hex[:6]}"
    )
    return flow


def answer(flow: Workflow, key: str, kind: str, data: object) -> None:
    """The result (``done``) or error of the one task step the instance waits for."""
    from xsm_celery.celery.workflow.step import Message

    view = flow.get(key)
    assert view is not None
    [(invoke, task_id)] = view.waiting_for.items()
    message = Message(f"{kind}:{task_id}", kind, invoke=invoke, dispatch=task_id, data=data)
    flow.step(key, message)


def stuck_compensation(flow: Workflow, key: str) -> DeadLetterRecord:
    """Run ``key`` into ``compensationFailed``: the charge fails, then so does the release."""
    flow.send_now(key, "START", order=9)
    answer(flow, key, "done", "reserved")
    answer(flow, key, "error", {"task": "shop.chargeCard", "type": "CardDeclined", "message": "no"})
    answer(flow, key, "error", {"task": "shop.releaseStock", "type": "IOError", "message": "down"})
    view = flow.get(key)
    assert view is not None
    assert view.value == "compensationFailed"
    return DeadLetterRecord.objects.get(topic=f"workflow:{flow.name}:{key}")


def diagram_of(page: str) -> ET.Element:
    """The diagram's ``<svg>`` element of an admin page."""
    found = re.search(r'<div class="xsm-diagram">(<svg.*?</svg>)</div>', page, re.S)
    assert found is not None, "the page draws no diagram"
    return ET.fromstring(found.group(1))


def states_of(svg: ET.Element) -> tuple[set[str], list[str]]:
    """(every state drawn, the marked ones) of a diagram."""
    groups = [g for g in svg.iter(f"{SVG}g") if g.get("data-state")]
    drawn = {g.get("data-state", "") for g in groups}
    marked = [g.get("data-state", "") for g in groups if "xsm-marked" in (g.get("class") or "")]
    return drawn, marked


def test_a_saga_compensation_failed_record_shows_the_chart_of_its_workflow(
    app: Celery, operator: Client
) -> None:
    """The compensationFailed page draws the checkout chart with that state marked."""
    flow = checkout_saga(app)
    row = stuck_compensation(flow, "o-9")
    assert row.machine_id == "checkout"
    page = operator.get(f"/admin/xsm_celery/deadletterrecord/{row.pk}/change/").content.decode()
    assert NO_CHART not in page
    drawn, marked = states_of(diagram_of(page))
    assert marked == ["checkout.compensationFailed"]
    assert {"checkout.steps.ship", "checkout.compensating.reserve"} <= drawn
    assert "Chart from: workflow" in page


def test_the_instance_page_and_the_dead_letter_page_draw_the_same_chart(
    app: Celery, operator: Client
) -> None:
    """One resolver: both pages draw the same states; each marks where the instance is."""
    flow = checkout_saga(app)
    row = stuck_compensation(flow, "o-10")
    instance = WorkflowInstance.objects.get(workflow=flow.name, key="o-10")
    letter_page = operator.get(f"/admin/xsm_celery/deadletterrecord/{row.pk}/change/")
    instance_page = operator.get(f"/admin/xsm_celery/workflowinstance/{instance.pk}/change/")
    letter_states, letter_marked = states_of(diagram_of(letter_page.content.decode()))
    instance_states, instance_marked = states_of(diagram_of(instance_page.content.decode()))
    assert letter_states == instance_states
    assert letter_marked == instance_marked == ["checkout.compensationFailed"]
    chart = resolve_chart("checkout", workflow=flow.name)
    assert chart.source == "workflow"
    assert chart.config == dict(flow.machine.config)
    stored = DjangoDeadLetterStore().get(row.pk)
    assert stored is not None
    assert find_chart(stored).structure_hash == chart.structure_hash


def test_a_workflow_step_message_record_shows_the_workflow_chart(
    app: Celery, operator: Client
) -> None:
    """A step message that gave up (task ``xsm.workflow.<name>``) shows its chart."""
    orders = Xsm(app).workflow(
        order_machine("charts.charge"), store="django", name=f"orders_{uuid.uuid4().hex[:6]}"
    )
    orders.start("o-1")
    record = make_record(
        machine_id="order",
        state_id="order.created",
        task_name=f"xsm.workflow.{orders.name}",
        task_args=["o-1", {"id": "m-1", "kind": "event", "type": "PAY"}],
        task_kwargs={},
        machine_hash=None,
    )
    DjangoDeadLetterStore().put(record)
    page = operator.get(f"/admin/xsm_celery/deadletterrecord/{record.id}/change/").content
    text = page.decode()
    assert NO_CHART not in text
    drawn, marked = states_of(diagram_of(text))
    assert marked == ["order.created"]
    assert "order.charging" in drawn


def test_a_task_step_record_keeps_its_task_chart_not_the_workflow_chart(app: Celery) -> None:
    """A task step's record names its workflow but carries its task's retry chart id."""
    orders = Xsm(app).workflow(
        order_machine("charts.charge"), store="django", name=f"orders_{uuid.uuid4().hex[:6]}"
    )
    chart = resolve_chart("task", workflow=orders.name)
    assert chart.source != "workflow"
    assert resolve_chart("order", workflow=orders.name).source == "workflow"


def test_a_record_of_an_unknown_machine_still_says_no_chart(operator: Client) -> None:
    """Nothing to draw is said as such, with the setting that fixes it."""
    record = make_record(machine_id="nowhere", state_id="nowhere.x", task_name="shop.none")
    DjangoDeadLetterStore().put(record)
    page = operator.get(f"/admin/xsm_celery/deadletterrecord/{record.id}/change/")
    assert NO_CHART in page.content.decode()
    assert find_chart(record).config is None
