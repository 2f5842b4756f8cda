"""The shipped retry chart, chart lookup, and the diagram in docs/celery.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xsm_celery.celery import DEFAULT_CHART, load_task_chart
from xsm_celery.celery.task.charts import shipped_charts
from xsm_celery.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_chart_is_the_seeds_retry_loop() -> None:
    """attempting / retrying / done / deadLettered, the last tagged dead-letter, seed names."""
    chart = load_task_chart(None)
    assert set(chart["states"]) == {"attempting", "retrying", "done", "deadLettered"}
    assert chart["states"]["deadLettered"]["tags"] == ["dead-letter"]
    assert chart["states"]["attempting"]["invoke"]["src"] == "work"
    after = chart["states"]["retrying"]["after"]["retryDelay"]
    assert after == [{"guard": "retryCanRetry", "target": "attempting"}, {"target": "deadLettered"}]


def test_the_chart_is_shipped_as_a_resource() -> None:
    """task_retry.json is installed in xsm_celery.charts and loads by name, with or without .json."""
    assert DEFAULT_CHART in shipped_charts()
    assert (
        load_task_chart("task_retry") == load_task_chart("task_retry.json") == load_task_chart(None)
    )


def test_a_path_and_a_dict_load_as_copies(tmp_path: Path) -> None:
    """A file path loads that file; a dict is copied, so later edits do not leak in."""
    custom = {"id": "mine", "initial": "a", "states": {"a": {}}}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(custom))
    assert load_task_chart(str(path)) == custom
    loaded = load_task_chart(custom)
    custom["id"] = "changed"
    assert loaded["id"] == "mine"


def test_an_unknown_chart_names_the_shipped_ones() -> None:
    """A name that is neither a file nor a shipped chart is refused, listing what exists."""
    with pytest.raises(ConfigurationError, match=r"task_retry\.json"):
        load_task_chart("no_such_chart")


def test_a_file_that_is_not_a_chart_is_refused(tmp_path: Path) -> None:
    """Broken JSON and a JSON list are both refused with the file named."""
    (tmp_path / "bad.json").write_text("{nope")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ConfigurationError, match="not JSON"):
        load_task_chart(str(tmp_path / "bad.json"))
    with pytest.raises(ConfigurationError, match="must be a JSON object"):
        load_task_chart(str(tmp_path / "list.json"))


def chart_edges(chart: dict) -> set[str]:
    """The chart's transitions as mermaid edges ``a --> b``."""
    edges = set()
    for name, state in chart["states"].items():
        invoke = state.get("invoke", {})
        for key in ("onDone", "onError"):
            branches = invoke.get(key, [])
            for branch in branches if isinstance(branches, list) else [branches]:
                edges.add(f"{name} --> {branch['target']}")
        for branches in state.get("after", {}).values():
            for branch in branches:
                edges.add(f"{name} --> {branch['target']}")
    return edges


def test_the_docs_diagram_matches_the_shipped_chart() -> None:
    """Every transition of task_retry.json is drawn in docs/celery.md, and nothing else."""
    text = (ROOT / "docs" / "celery.md").read_text()
    block = text.split("```mermaid", 1)[1].split("```", 1)[0]
    drawn = {
        line.strip().split(" : ")[0]
        for line in block.splitlines()
        if "-->" in line and "[*]" not in line
    }
    assert drawn == chart_edges(load_task_chart(None))
