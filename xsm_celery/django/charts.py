"""Find the chart of a dead letter or a workflow instance, for the diagram and the replay check.

One resolver serves the dead-letter page and the workflow instance page, so both draw the
same chart for the same machine. Where a chart comes from, first match wins:
``XSM_CELERY["CHARTS"][machine_id]`` (a JSON file path or a dotted path to a dict or a
machine), the declared workflow the record or instance belongs to (a saga's
``compensationFailed``, a step message), the registered ``ChartTask`` of the record's task,
then a chart shipped with the package whose ``id`` is the machine id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from xsm_celery.django.conf import get_settings, import_string
from xsm_celery.engine.hashing import structure_hash
from xsm_celery.errors import ConfigurationError, XsmError
from xsm_celery.patterns.dead_letter import DeadLetter
from xsm_celery.patterns.dead_letter.workflow import workflow_of_record

__all__ = ["ChartInfo", "find_chart", "resolve_chart"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChartInfo:
    """The chart found for a record (``config`` None when none was found)."""

    config: Mapping[str, Any] | None
    source: str
    structure_hash: str | None = None

    def changed_since(self, record: DeadLetter) -> bool:
        """Whether the chart's structure differs from the one the record was taken from."""
        return bool(
            self.structure_hash
            and record.machine_hash
            and self.structure_hash != record.machine_hash
        )


def find_chart(record: DeadLetter, app: Any = None) -> ChartInfo:
    """The current chart for ``record``; never raises, an unusable source is logged."""
    owner = workflow_of_record(record)
    return resolve_chart(
        record.machine_id,
        workflow=owner.workflow if owner is not None else None,
        task_name=record.task_name,
        app=app,
    )


def resolve_chart(
    machine_id: str,
    *,
    workflow: str | None = None,
    task_name: str | None = None,
    app: Any = None,
) -> ChartInfo:
    """The current chart of ``machine_id``, looked up in the order the module docstring gives.

    ``workflow`` is the declared workflow the machine runs in (its chart is used only when
    its id is ``machine_id``: a task step's record carries its task's own retry chart);
    ``task_name`` the Celery task whose ``ChartTask`` chart may be it. Never raises: an
    unusable source is logged and the next one is tried.
    """
    loaders: tuple[tuple[str, Callable[[], Mapping[str, Any] | None]], ...] = (
        ("XSM_CELERY['CHARTS']", lambda: _from_settings(machine_id)),
        ("workflow", lambda: _from_workflow(machine_id, workflow, app)),
        ("task", lambda: _from_task(task_name, app)),
        ("shipped", lambda: _from_package(machine_id)),
    )
    for source, loader in loaders:
        try:
            config = loader()
        except (XsmError, OSError, ValueError, ImportError, LookupError) as exc:
            logger.warning("chart for %s from %s unusable: %s", machine_id, source, exc)
            continue
        if config is not None:
            return ChartInfo(dict(config), source, structure_hash(config))
    return ChartInfo(None, "none")


def _from_settings(machine_id: str) -> Mapping[str, Any] | None:
    spec = get_settings().charts.get(machine_id)
    if spec is None:
        return None
    path = Path(spec)
    if path.suffix == ".json":
        return _parse(path.read_text(encoding="utf-8"), spec)
    found = import_string(spec)
    config = getattr(found, "config", found)
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            f"XSM_CELERY['CHARTS'][{machine_id!r}] = {spec!r} is neither a chart dict "
            "nor a machine; give a .json path or 'module:CHART'"
        )
    return config


def _from_workflow(machine_id: str, workflow: str | None, app: Any) -> Mapping[str, Any] | None:
    """The chart of the declared workflow ``workflow``, when it is the machine's.

    The workflow registry holds the workflows declared in this process; the Celery app's
    task modules are imported first (as a worker would) when it lacks the one asked for.
    """
    if not workflow:
        return None
    try:
        from xsm_celery.celery.workflow.api import find_workflow
    except ImportError:
        return None
    flow = find_workflow(workflow)
    if flow is None:
        _load_celery_app(app)
        flow = find_workflow(workflow)
    if flow is None:
        return None
    return flow.machine.config if str(flow.machine.id) == machine_id else None


def _load_celery_app(app: Any) -> Any:
    if app is not None:
        return app
    from xsm_celery.django.admin.celery_app import celery_app

    return celery_app()


def _from_task(task_name: str | None, app: Any) -> Mapping[str, Any] | None:
    if not task_name:
        return None
    from xsm_celery.django.admin.celery_app import task_chart

    return task_chart(_load_celery_app(app), task_name)


def _from_package(machine_id: str) -> Mapping[str, Any] | None:
    folder = files("xsm_celery.charts")
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".json"):
            config = _parse(item.read_text(encoding="utf-8"), item.name)
            if config.get("id") == machine_id:
                return config
    return None


def _parse(text: str, where: str) -> Mapping[str, Any]:
    config = json.loads(text)
    if not isinstance(config, dict):
        raise ConfigurationError(f"{where} is not a JSON object")
    return config
