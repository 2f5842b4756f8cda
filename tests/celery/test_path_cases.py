"""xsm_celery.testing: path tests generated from a workflow's chart, run through send_now.

The workflows here keep their instances in ``memory://`` stores and publish to Celery's
in-memory broker: a case runs wholly in this process. The documented example in
docs/workflows.md is run as its own pytest session.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from xsm_celery import MachineLogic, create_machine
from xsm_celery.celery import Xsm, celery_service
from xsm_celery.celery.workflow import Workflow
from xsm_celery.errors import ConfigurationError
from xsm_celery.testing import PathCase, forceable, path_cases

ROOT = Path(__file__).resolve().parents[2]

CHART: dict[str, Any] = {
    "id": "order",
    "initial": "created",
    "context": {"total": 0},
    "states": {
        "created": {
            "on": {"PAY": [{"guard": "has_total", "target": "charging"}, {"target": "rejected"}]},
            "after": {"payment_timeout": "expired"},
        },
        "charging": {
            "invoke": {"id": "charge", "src": "charge", "onDone": "paid", "onError": "failed"},
        },
        "paid": {"on": {"SHIP": "shipped"}},
        "failed": {"on": {"RETRY": "charging"}},
        "rejected": {"type": "final"},
        "shipped": {"type": "final"},
        "expired": {"type": "final"},
    },
}


def _cases(params: list[Any]) -> dict[str, PathCase]:
    return {param.id: param.values[0] for param in params}


def _workflow(chart: dict[str, Any], *, forced: bool = True) -> Workflow:
    app = Celery(f"paths-{uuid.uuid4().hex[:8]}", broker="memory://")

    @app.task(name=f"{app.main}.charge")
    def charge(amount: int) -> dict[str, int]:
        return {"charged": amount}

    machine = create_machine(
        chart,
        logic=MachineLogic(
            guards={"has_total": lambda ctx, event: event.payload.get("total", 0) > 0},
            services={"charge": celery_service(charge, kwargs=lambda c, e: {"amount": 1})},
            delays={"payment_timeout": 15 * 60_000},
        ),
    )
    workflow: Workflow = Xsm(app).workflow(
        forceable(machine) if forced else machine, store="memory://"
    )
    return workflow


def test_one_case_per_state_and_per_transition_with_readable_ids() -> None:
    """The ids name the states reached, or the transition covered, in the chart's terms."""
    machine = create_machine(CHART)
    states = _cases(path_cases(machine))
    assert {name: case.path.event_string() for name, case in states.items()} == {
        "created": "",
        "charging": "PAY",
        "rejected": "PAY",
        "expired": "+?",
        "paid": "PAY,done.invoke.charge",
        "failed": "PAY,error.platform.charge",
        "shipped": "PAY,done.invoke.charge,SHIP",
    }
    transitions = _cases(path_cases(machine, coverage=True))
    assert sorted(transitions) == [
        "charging-charge.onDone->paid",
        "charging-charge.onError->failed",
        "created-PAY->charging",
        "created-PAY->rejected",
        "created-after.payment_timeout->expired",
        "failed-RETRY->charging",
        "paid-SHIP->shipped",
    ]
    assert transitions["failed-RETRY->charging"].path.event_string() == (
        "PAY,error.platform.charge,RETRY"
    )


@pytest.mark.parametrize("coverage", [False, True])
def test_every_case_runs_on_the_workflow(coverage: bool) -> None:
    """Each path replays through send_now, completions and timers, landing where it says."""
    orders = _workflow(CHART)
    for case in _cases(path_cases(orders.machine, coverage=coverage)).values():
        view = case.run(orders)
        assert view.state_ids == case.path.final_states


def test_a_timer_step_fires_without_waiting() -> None:
    """The expired case moves the instance's 15-minute deadline and fires it now."""
    orders = _workflow(CHART)
    case = _cases(path_cases(orders.machine))["expired"]
    view = case.run(orders, key="late-1")
    assert view.key == "late-1"
    assert view.value == "expired"
    assert view.status == "done"
    assert view.timers == ()


def test_a_forced_guard_needs_a_forceable_machine() -> None:
    """Without forceable() the case refuses to run and says how to build the workflow."""
    orders = _workflow(CHART, forced=False)
    cases = _cases(path_cases(orders.machine))
    with pytest.raises(ConfigurationError, match=r"guard:has_total=False.*forceable"):
        cases["rejected"].run(orders)
    assert cases["charging"].path.steps[0].assumptions == ()


def test_a_workflow_that_leaves_the_path_fails_the_case() -> None:
    """A chart that moved on since the paths were found fails at the step that differs."""
    cases = _cases(path_cases(create_machine(CHART)))
    changed = {**CHART, "states": {**CHART["states"], "paid": {"on": {"SHIP": "failed"}}}}
    orders = _workflow(changed)
    with pytest.raises(AssertionError, match=r"after step 3 \(SHIP\).*'order\.failed'"):
        cases["shipped"].run(orders)
    cases["paid"].run(orders)


def _documented_example() -> str:
    text = (ROOT / "docs" / "workflows.md").read_text("utf-8")
    section = text.split("## Testing workflows", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


@pytest.mark.slow
def test_the_documented_example_passes(tmp_path: Path) -> None:
    """The example of docs/workflows.md runs green as a pytest session of its own."""
    (tmp_path / "test_order_paths.py").write_text(_documented_example())
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "14 passed" in result.stdout
    assert "test_every_transition_is_taken[created-PAY->rejected]" in result.stdout
