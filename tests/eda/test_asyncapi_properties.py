"""Property: whatever chart it is given, asyncapi_document produces a valid AsyncAPI document."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import chart_logic, charts
from xsm_celery.eda import asyncapi_document, validate_asyncapi
from xsm_celery.engine import create_machine

PUBLISH = st.one_of(
    st.just(True),
    st.text(alphabet="abcxyz./:- ", min_size=1, max_size=12).filter(str.strip),
    st.builds(
        lambda t, f: {"type": t, "data": f},
        st.sampled_from(["a.b", "x/y", "thing.done"]),
        st.lists(st.sampled_from(["n", "total", "steps"]), max_size=3),
    ),
)


def _with_publications(chart: dict[str, Any], draw: st.DrawFn) -> dict[str, Any]:
    """Put a meta.publish on some transitions of a generated chart."""

    def walk(node: dict[str, Any]) -> None:
        for event, spec in list(node.get("on", {}).items()):
            if isinstance(spec, dict) and draw(st.booleans()):
                node["on"][event] = {**spec, "meta": {"publish": draw(PUBLISH)}}
        for child in node.get("states", {}).values():
            walk(child)

    walk(chart)
    return chart


@st.composite
def published_charts(draw: st.DrawFn) -> dict[str, Any]:
    return _with_publications(draw(charts()), draw)


@settings(max_examples=40, deadline=None)
@given(published_charts(), st.sampled_from(["kafka", "amqp", "redis"]))
def test_generated_documents_always_validate(chart: dict[str, Any], protocol: str) -> None:
    """asyncapi_document output validates against the AsyncAPI 3.0.0 schema for any chart."""
    machine = create_machine(chart, logic=chart_logic())
    doc = asyncapi_document(machine, {"host": "broker:1234", "protocol": protocol})
    validate_asyncapi(doc)
    assert doc["asyncapi"] == "3.0.0"
