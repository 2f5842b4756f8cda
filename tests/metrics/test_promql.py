"""The PromQL name reader the dashboard check relies on, and the shipped files it reads."""

from __future__ import annotations

import pytest

from tests.metrics.promql import metric_names, registered_names, shipped_expressions


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("sum by (task) (rate(xsm_task_retries_total[5m])) > 1", {"xsm_task_retries_total"}),
        (
            'histogram_quantile(0.95, sum by (le, name) (rate(celery_task_runtime_bucket{state="succeeded"}[5m])))',
            {"celery_task_runtime_bucket"},
        ),
        (
            "sum(celery_worker_up) < count(celery_worker_up) and on() vector(1)",
            {"celery_worker_up"},
        ),
        ('max(celery_queue_length{queue_name=~"a|b"}) > 1e3', {"celery_queue_length"}),
        (
            "increase(xsm_dead_letters_total[15m]) / ignoring(reason) group_left sum(up)",
            {"xsm_dead_letters_total", "up"},
        ),
    ],
)
def test_metric_names_finds_the_selected_series_only(expression: str, names: set[str]) -> None:
    """Functions, groupings, matchers, ranges and numbers are not taken for metric names."""
    assert metric_names(expression) == names


def test_every_shipped_expression_names_at_least_one_metric() -> None:
    """No dashboard target or alert is left with nothing to check (a parser that reads nothing)."""
    expressions = shipped_expressions()
    assert len(expressions) >= 10
    assert {where for where, names in expressions.items() if not names} == set()


def test_registered_names_cover_both_exporters() -> None:
    """The registered families include the xsm_* counters and celery-exporter's names."""
    names = registered_names()
    assert {"xsm_task_attempts_total", "celery_task_succeeded_total"} <= names
    assert {"celery_task_runtime_bucket", "celery_task_failed_total"} <= names
    assert "celery_queue_length" not in names  # read on scrape, not registered
