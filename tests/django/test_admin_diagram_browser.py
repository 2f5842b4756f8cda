"""The saga diagram in headless Chromium: the active state is in view, no label covers another.

A four-step ``checkout`` saga stuck in ``compensationFailed`` is opened on its instance page and
on its dead letter's page. In each, the marked state's box lies inside the diagram's visible
box (the box scrolls to it when the chart is larger), the diagram box stays inside the page,
and no two edge labels' boxes overlap, measured on what the browser laid out. Screenshots go
to ``artifacts/django-admin/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from tests.django.admin_support import make_user
from tests.django.test_admin_charts import checkout_saga, stuck_compensation
from tests.django.test_browser import SHOTS, admin_server, chromium_browser, log_in
from xsm_celery.celery import Workflow
from xsm_celery.django.models import WorkflowInstance

pytestmark = [pytest.mark.browser, pytest.mark.slow]

__all__ = ["admin_server", "chromium_browser"]

Box = dict[str, float]


@pytest.fixture
def checkout(sqlite_db: str) -> Iterator[Workflow]:
    """The checkout saga on the Django stores; task messages go to the in-memory broker."""
    app = Celery(f"diagram-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    from xsm_celery.django.stores import DjangoDeadLetterStore

    app.conf.xsm_dead_letter_store = DjangoDeadLetterStore()
    yield checkout_saga(app)
    app.close()


def box_of(page: Any, selector: str) -> Box:
    """The bounding box of the first element ``selector`` finds, in viewport pixels."""
    found: Box | None = page.locator(selector).first.bounding_box()
    assert found is not None, f"{selector} is not rendered"
    return found


def inside(inner: Box, outer: Box) -> bool:
    return (
        outer["x"] <= inner["x"]
        and outer["y"] <= inner["y"]
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"]
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"]
    )


def overlapping_labels(page: Any) -> list[tuple[str, str]]:
    """Pairs of edge labels whose boxes, as the browser drew them, overlap."""
    labels = page.locator("#xsm-diagram .xsm-edge text")
    boxes = [
        (labels.nth(n).text_content(), labels.nth(n).bounding_box()) for n in range(labels.count())
    ]
    assert len(boxes) >= 10
    pairs = []
    for n, (text, one) in enumerate(boxes):
        for other_text, other in boxes[n + 1 :]:
            if (
                one["x"] < other["x"] + other["width"]
                and other["x"] < one["x"] + one["width"]
                and one["y"] < other["y"] + other["height"]
                and other["y"] < one["y"] + one["height"]
            ):
                pairs.append((text, other_text))
    return pairs


def check_diagram(page: Any, shot: str) -> None:
    """The marked state is visible in the diagram box, which fits the page; labels apart."""
    page.wait_for_selector(".xsm-diagram[data-centred=true]")
    frame = box_of(page, ".xsm-diagram")
    marked = box_of(page, "#xsm-diagram .xsm-marked rect")
    assert inside(marked, frame), (marked, frame)
    assert frame["x"] + frame["width"] <= page.viewport_size["width"]
    assert overlapping_labels(page) == []
    assert page.locator("#xsm-diagram .xsm-marked").get_attribute("data-state") == (
        "checkout.compensationFailed"
    )
    page.screenshot(path=str(SHOTS / shot), full_page=True)


def test_the_saga_instance_page_shows_the_active_state_and_apart_labels(
    admin_server: str, chromium_browser: Any, checkout: Workflow
) -> None:
    """Instance page and dead-letter page: active state in view, labels apart."""
    record = stuck_compensation(checkout, "o-7")
    row = WorkflowInstance.objects.get(workflow=checkout.name, key="o-7")
    make_user("ana", superuser=True)
    page = log_in(chromium_browser, admin_server, "ana")
    page.goto(f"{admin_server}/admin/xsm_celery/workflowinstance/{row.pk}/change/")
    check_diagram(page, "diagram-1-saga-instance.png")

    page.goto(f"{admin_server}/admin/xsm_celery/deadletterrecord/{record.pk}/change/")
    assert "No chart found" not in page.content()
    check_diagram(page, "diagram-2-saga-dead-letter.png")


def test_a_narrow_window_scrolls_the_diagram_to_the_active_state(
    admin_server: str, chromium_browser: Any, checkout: Workflow
) -> None:
    """In a window narrower and shorter than the chart, the box scrolls to the active state."""
    stuck_compensation(checkout, "o-8")
    row = WorkflowInstance.objects.get(workflow=checkout.name, key="o-8")
    make_user("ben", superuser=True)
    page = log_in(chromium_browser, admin_server, "ben")
    page.set_viewport_size({"width": 700, "height": 600})
    page.goto(f"{admin_server}/admin/xsm_celery/workflowinstance/{row.pk}/change/")
    page.wait_for_selector(".xsm-diagram[data-centred=true]")
    frame = page.locator(".xsm-diagram")
    assert frame.evaluate("box => box.scrollHeight > box.clientHeight")
    assert frame.evaluate("box => box.scrollTop") > 0
    check_diagram(page, "diagram-3-narrow.png")
