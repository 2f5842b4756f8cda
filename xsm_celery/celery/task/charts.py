"""Find the retry chart a task asked for: a dict, a file path, or a shipped chart's name.

The lookup happens once, when the task is bound to its app; a run never reads a file.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

from xsm_celery.errors import ConfigurationError

__all__ = ["DEFAULT_CHART", "ChartSpec", "load_task_chart", "shipped_charts"]

#: The chart a task runs when it names none: the seed's four-state retry loop.
DEFAULT_CHART = "task_retry.json"

#: What ``retry_chart=`` accepts.
ChartSpec = str | os.PathLike[str] | Mapping[str, Any] | None


def shipped_charts() -> list[str]:
    """The chart names installed with the package (``xsm_celery.charts``)."""
    folder = files("xsm_celery.charts")
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))


def load_task_chart(spec: ChartSpec) -> dict[str, Any]:
    """Return a private copy of the chart ``spec`` names.

    A string is first a file path, then the name of a shipped chart (with or without
    ``.json``), so ``"charts/payment_retry.json"`` and ``"task_retry"`` both work.

    Raises:
        ConfigurationError: nothing is found, or the file is not a JSON object.
    """
    if spec is None:
        spec = DEFAULT_CHART
    if isinstance(spec, Mapping):
        return copy.deepcopy(dict(spec))
    path = Path(os.fspath(spec))
    if path.is_file():
        return _parse(path.read_text(encoding="utf-8"), str(path))
    resource = _resource(path.name if path.suffix else f"{path.name}.json")
    if resource is not None and str(spec) in (resource, resource[: -len(".json")]):
        text = (files("xsm_celery.charts") / resource).read_text(encoding="utf-8")
        return _parse(text, f"xsm_celery.charts/{resource}")
    raise ConfigurationError(
        f"retry_chart={os.fspath(spec)!r} is neither a file (looked in {Path.cwd()}) nor a "
        f"shipped chart ({', '.join(shipped_charts())}); give a path, a shipped name or a dict"
    )


def _resource(name: str) -> str | None:
    return name if (files("xsm_celery.charts") / name).is_file() else None


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        chart = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"retry chart {where} is not JSON: {exc}") from exc
    if not isinstance(chart, dict):
        raise ConfigurationError(
            f"retry chart {where} must be a JSON object (a chart), got {type(chart).__name__}"
        )
    return chart
