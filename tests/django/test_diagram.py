"""The server-drawn chart diagram: every state once, nesting, marking, escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from xsm_celery.celery.task.charts import load_task_chart
from xsm_celery.charttools.svg import render_chart_svg

SVG = "{http://www.w3.org/2000/svg}"


def boxes(svg: str) -> dict[str, tuple[float, float, float, float]]:
    """State path -> (x, y, width, height) of its outer box, parsed from the SVG."""
    root = ET.fromstring(svg)
    found = {}
    for group in root.iter(f"{SVG}g"):
        path = group.get("data-state")
        if path is not None:
            assert path not in found, f"{path} drawn twice"
            rect = group.find(f"{SVG}rect")
            assert rect is not None
            found[path] = tuple(float(rect.get(k, "0")) for k in ("x", "y", "width", "height"))
    return found  # type: ignore[return-value]


def marked(svg: str) -> list[str]:
    """Paths of the states drawn as marked."""
    root = ET.fromstring(svg)
    return [
        g.get("data-state", "")
        for g in root.iter(f"{SVG}g")
        if "xsm-marked" in (g.get("class") or "")
    ]


def test_the_shipped_retry_chart_draws_every_state_and_transition() -> None:
    """The task retry chart: four states, the dead-letter one marked, events labelled."""
    svg = render_chart_svg(load_task_chart(None), marked="task.deadLettered")
    assert set(boxes(svg)) == {
        "task",
        "task.attempting",
        "task.retrying",
        "task.done",
        "task.deadLettered",
    }
    assert marked(svg) == ["task.deadLettered"]
    for label in ("error: work [retryGiveUp]", "after retryDelay [retryCanRetry]", "done: work"):
        assert label in svg


def test_a_path_without_the_machine_id_or_a_unique_key_also_marks() -> None:
    """'deadLettered' and 'task.deadLettered' mark the same state; an unknown one marks none."""
    chart = load_task_chart(None)
    assert marked(render_chart_svg(chart, marked="deadLettered")) == ["task.deadLettered"]
    assert marked(render_chart_svg(chart, marked="nowhere")) == []
    assert marked(render_chart_svg(chart)) == []


def test_an_ambiguous_key_marks_nothing() -> None:
    """A bare key found in two places is not guessed."""
    chart = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {"initial": "x", "states": {"x": {}}},
            "b": {"initial": "x", "states": {"x": {}}},
        },
    }
    assert marked(render_chart_svg(chart, marked="x")) == []
    assert marked(render_chart_svg(chart, marked="m.b.x")) == ["m.b.x"]


def test_text_from_the_chart_is_escaped() -> None:
    """State names, events and titles cannot inject markup into the admin page."""
    chart = {
        "id": "<b>m</b>",
        "initial": "<script>",
        "states": {"<script>": {"on": {"<img src=x onerror=alert(1)>": "ok"}}, "ok": {}},
    }
    svg = render_chart_svg(chart, title='"><script>')
    assert "<script>" not in svg
    assert "<img" not in svg
    ET.fromstring(svg)


def test_unknown_targets_are_skipped() -> None:
    """A transition to a state that does not exist is left out instead of failing."""
    svg = render_chart_svg({"id": "m", "initial": "a", "states": {"a": {"on": {"GO": "zz"}}}})
    assert "GO" not in svg
    assert set(boxes(svg)) == {"m", "m.a"}


def test_parallel_regions_and_deep_targets_are_drawn() -> None:
    """Parallel regions sit side by side; '#id' and dotted targets resolve."""
    chart = {
        "id": "p",
        "type": "parallel",
        "states": {
            "left": {"initial": "one", "states": {"one": {"on": {"X": "#p.right.two"}}}},
            "right": {"initial": "two", "states": {"two": {"id": "deep", "on": {"Y": "#deep"}}}},
        },
    }
    svg = render_chart_svg(chart)
    found = boxes(svg)
    assert found["p.left"][0] + found["p.left"][2] <= found["p.right"][0]
    assert ">X<" in svg
    assert ">Y<" in svg
    assert 'stroke-dasharray="5 3"' in svg


_keys = st.sampled_from(["a", "b", "c", "idle", "run", "wait", "done", "x_1"])


@st.composite
def charts(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    """Random nested charts with transitions among siblings."""
    keys = draw(st.lists(_keys, min_size=1, max_size=4, unique=True))
    states: dict[str, Any] = {}
    for key in keys:
        node: dict[str, Any] = {}
        if depth < 2 and draw(st.booleans()):
            node = draw(charts(depth=depth + 1))
        targets = draw(st.lists(st.sampled_from(keys), max_size=3))
        node["on"] = {f"E{n}": target for n, target in enumerate(targets)}
        if draw(st.booleans()):
            node["after"] = {"1000": draw(st.sampled_from(keys))}
        states[key] = node
    chart: dict[str, Any] = {"states": states}
    if draw(st.booleans()) and depth > 0:
        chart["type"] = "parallel"
    else:
        chart["initial"] = draw(st.sampled_from(keys))
    return chart


def _count(chart: dict[str, Any]) -> int:
    return 1 + sum(_count(child) for child in chart.get("states", {}).values())


@settings(max_examples=60, deadline=None)
@given(chart=charts())
def test_children_sit_inside_parents_and_siblings_never_overlap(chart: dict[str, Any]) -> None:
    """For any chart, every state is drawn once, inside its parent, apart from its siblings."""
    chart = {"id": "m", **chart}
    found = boxes(render_chart_svg(chart))
    assert len(found) == _count(chart)
    for path, (x, y, w, h) in found.items():
        parent = path.rpartition(".")[0]
        if parent:
            px, py, pw, ph = found[parent]
            assert px <= x
            assert py <= y
            assert x + w <= px + pw
            assert y + h <= py + ph
    for path, (x, y, w, h) in found.items():
        for other, (ox, oy, ow, oh) in found.items():
            same_parent = path.rpartition(".")[0] == other.rpartition(".")[0]
            if path < other and same_parent:
                assert x + w <= ox or ox + ow <= x or y + h <= oy or oy + oh <= y
