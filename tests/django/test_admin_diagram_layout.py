"""The admin diagram's layout: wide charts go top-down, and edge labels are kept apart.

The browser test (``test_admin_diagram_browser.py``) measures one saga as Chromium draws it;
these check the geometry for any chart: boxes nested and apart in both directions, and the
label boxes the drawing reserves never overlapping.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.django.test_diagram import boxes, charts
from xsm_celery.charttools.layout import MAX_WIDTH, build, layout, walk
from xsm_celery.charttools.svg import _LABEL_CHAR_W, _LINE_H, render_chart_svg
from xsm_celery.patterns import SagaBuilder

SVG = "{http://www.w3.org/2000/svg}"


def wide_saga() -> dict[str, Any]:
    saga = SagaBuilder("checkout", start_event="START")
    for name in ("reserve", "charge", "ship", "invoice", "notify"):
        saga = saga.step(name, invoke=f"{name}Task", compensate=f"undo_{name}", timeout_ms=5_000)
    return saga.build()


def label_boxes(svg: str) -> list[tuple[float, float, float, float]]:
    """(left, top, right, bottom) of each edge label, with the width the drawing reserves."""
    found = []
    for text in ET.fromstring(svg).iter(f"{SVG}text"):
        spans = list(text.iter(f"{SVG}tspan"))
        if not spans:
            continue
        x, y = float(spans[0].get("x", "0")), float(spans[0].get("y", "0"))
        width = max(len(s.text or "") for s in spans) * _LABEL_CHAR_W + 4
        found.append((x - width / 2, y - 10, x + width / 2, y + _LINE_H * (len(spans) - 1) + 3))
    return found


def test_a_wide_saga_is_laid_out_top_down_within_the_width() -> None:
    """Left to right the saga is far wider than a page; top-down it fits MAX_WIDTH."""
    chart = wide_saga()
    root = build(chart)
    layout(root, max_width=10_000)
    assert root.w > 1.5 * MAX_WIDTH
    root = build(chart)
    layout(root)
    assert root.direction == "TB"
    assert root.w <= MAX_WIDTH
    width = float(re.search(r'width="(\d+)"', render_chart_svg(chart)).group(1))  # type: ignore[union-attr]
    assert width <= MAX_WIDTH + 20


def test_the_wide_saga_labels_do_not_overlap() -> None:
    """Nineteen and more labels, none over another."""
    found = label_boxes(render_chart_svg(wide_saga()))
    assert len(found) >= 19
    for n, (l1, t1, r1, b1) in enumerate(found):
        for l2, t2, r2, b2 in found[n + 1 :]:
            assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1


@settings(max_examples=60, deadline=None, derandomize=True)
@given(chart=charts(), max_width=st.sampled_from([0.0, 300.0, MAX_WIDTH]))
def test_top_down_boxes_nest_and_stay_apart(chart: dict[str, Any], max_width: float) -> None:
    """For any chart and width, children sit inside parents, apart from their siblings."""
    root = build({"id": "m", **chart})
    layout(root, max_width=max_width)
    nodes = list(walk(root))
    for node in nodes:
        for child in node.children:
            assert node.x <= child.x
            assert child.x + child.w <= node.x + node.w + 1e-6
            assert node.y <= child.y
            assert child.y + child.h <= node.y + node.h + 1e-6
        for n, one in enumerate(node.children):
            for other in node.children[n + 1 :]:
                assert (
                    one.x + one.w <= other.x
                    or other.x + other.w <= one.x
                    or one.y + one.h <= other.y
                    or other.y + other.h <= one.y
                )


@settings(max_examples=60, deadline=None, derandomize=True)
@given(chart=charts())
def test_labels_never_overlap_and_every_state_is_drawn(chart: dict[str, Any]) -> None:
    """For any chart, the label boxes are pairwise apart and every state is drawn once."""
    svg = render_chart_svg({"id": "m", **chart})
    assert len(boxes(svg)) == len(list(walk(build({"id": "m", **chart}))))
    found = label_boxes(svg)
    for n, (l1, t1, r1, b1) in enumerate(found):
        for l2, t2, r2, b2 in found[n + 1 :]:
            assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1
