"""The metric names a PromQL expression uses, and the names the package exports.

The alert rules are read line by line (no YAML library in the test dependencies): each
rule's ``expr`` on one line. Enough of PromQL for the shipped dashboard and alert rules: label matchers, ``by (...)``
groupings, range selectors, strings and numbers are removed, function calls and keywords
are skipped, and what is left is the metric names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from xsm_celery.metrics.app_tasks import AppTaskMetrics
from xsm_celery.metrics.prometheus import PrometheusMetrics

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "observability"

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    | {"and", "or", "unless", "inf", "nan"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_ALERT = re.compile(r"^\s*-\s*alert:\s*(\S+)\s*$", re.MULTILINE)
_EXPR = re.compile(r"^\s*expr:\s*(.+?)\s*$", re.MULTILINE)
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expression: str) -> set[str]:
    """The metric names ``expression`` selects."""
    text = _STRING.sub(" ", expression)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _NAME.finditer(text):
        rest = text[match.end() :].lstrip()
        before = text[: match.start()]
        if rest.startswith("(") or match.group() in _KEYWORDS:
            continue
        if before and (before[-1].isdigit() or before[-1] == "."):
            continue  # the unit of a number such as 1e3
        names.add(match.group())
    return names


def shipped_expressions() -> dict[str, set[str]]:
    """``where -> metric names`` for every expression of the dashboard and the alert rules."""
    found: dict[str, set[str]] = {}
    rules = (EXAMPLES / "alerts.yml").read_text()
    alerts = _ALERT.findall(rules)
    expressions = _EXPR.findall(rules)
    assert len(alerts) == len(expressions), "write each alert's expr on one line"
    for alert, expression in zip(alerts, expressions, strict=True):
        found[f"alert {alert}"] = metric_names(expression)
    dashboard = json.loads((EXAMPLES / "grafana-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for n, target in enumerate(panel.get("targets", [])):
            found[f"panel {panel['title']} #{n}"] = metric_names(target["expr"])
    return found


def _sample_names(name: str, kind: str) -> set[str]:
    if kind == "counter":
        return {f"{name}_total", f"{name}_created"}
    if kind == "histogram":
        return {f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"}
    return {name}


def registered_names() -> set[str]:
    """The sample names every metric the exporters register can have (counted or not)."""
    registry = CollectorRegistry()
    PrometheusMetrics(registry)
    AppTaskMetrics(registry, "probe")
    return {
        sample
        for family in registry.collect()
        for sample in _sample_names(family.name, family.type)
    }


def exported_names(scrape: str) -> set[str]:
    """The registered names plus every family a real scrape's text declares."""
    scraped = {
        sample
        for family in text_string_to_metric_families(scrape)
        for sample in _sample_names(family.name, family.type)
    }
    return registered_names() | scraped
