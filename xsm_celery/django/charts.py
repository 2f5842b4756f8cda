"""Find the chart a dead letter was captured from, for the diagram and the replay check.

Where a chart comes from, first match wins: ``XSM_CELERY["CHARTS"][machine_id]`` (a JSON
file path or a dotted path to a dict or a machine), the registered ``ChartTask`` of the
record's task, then a chart shipped with the package whose ``id`` is the machine id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from xsm_celery.django.conf import get_settings, import_string
from xsm_celery.engine.hashing import structure_hash
from xsm_celery.errors import ConfigurationError, XsmError
from xsm_celery.patterns.dead_letter import DeadLetter

__all__ = ["ChartInfo", "find_chart"]

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
    for source, loader in (
        ("XSM_CELERY['CHARTS']", _from_settings),
        ("task", lambda r: _from_task(r, app)),
        ("shipped", _from_package),
    ):
        try:
            config = loader(record)
        except (XsmError, OSError, ValueError, ImportError, LookupError) as exc:
            logger.warning("chart for %s from %s unusable: %s", record.machine_id, source, exc)
            continue
        if config is not None:
            return ChartInfo(dict(config), source, structure_hash(config))
    return ChartInfo(None, "none")


def _from_settings(record: DeadLetter) -> Mapping[str, Any] | None:
    spec = get_settings().charts.get(record.machine_id)
    if spec is None:
        return None
    path = Path(spec)
    if path.suffix == ".json":
        return _parse(path.read_text(encoding="utf-8"), spec)
    found = import_string(spec)
    config = getattr(found, "config", found)
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            f"XSM_CELERY['CHARTS'][{record.machine_id!r}] = {spec!r} is neither a chart dict "
            "nor a machine; give a .json path or 'module:CHART'"
        )
    return config


def _from_task(record: DeadLetter, app: Any) -> Mapping[str, Any] | None:
    if not record.task_name:
        return None
    if app is None:
        from xsm_celery.django.admin.celery_app import celery_app

        app = celery_app()
    from xsm_celery.django.admin.celery_app import task_chart

    return task_chart(app, record.task_name)


def _from_package(record: DeadLetter) -> Mapping[str, Any] | None:
    folder = files("xsm_celery.charts")
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".json"):
            config = _parse(item.read_text(encoding="utf-8"), item.name)
            if config.get("id") == record.machine_id:
                return config
    return None


def _parse(text: str, where: str) -> Mapping[str, Any]:
    config = json.loads(text)
    if not isinstance(config, dict):
        raise ConfigurationError(f"{where} is not a JSON object")
    return config
