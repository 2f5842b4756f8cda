"""Path tests for a workflow, generated from its chart: one pytest case per path.

:func:`path_cases` asks the graph tools for the shortest path to every configuration the
chart can reach (or, with ``coverage=True``, a shortest path through every transition) and
returns them as ``pytest.param`` values with readable ids, ready for
``@pytest.mark.parametrize``. Each :class:`PathCase` runs its path on a real workflow in this
process: it starts a fresh instance, sends each event with ``send_now``, delivers each task
step's result, and fires each timer by moving the instance's stored deadlines forward (a
simulated clock for that one instance, so no test sleeps), asserting the active states after
every step. Use a ``memory://`` store for speed or your real one for fidelity.

A path taken with a guard's answer forced needs the workflow's machine built with
:func:`~xsm_celery.engine.graph_model.forceable`, whose guards answer as each step assumes
while the case runs and call your own guards otherwise. Needs pytest (a test dependency).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from xsm_celery.celery.workflow.messages import Message
from xsm_celery.engine.graph import (
    DEFAULT_MAX_DEPTH,
    GuardPredicate,
    shortest_paths,
    transition_paths,
)
from xsm_celery.engine.graph_model import (
    INVOCATION_RESULT_PREFIXES,
    Path,
    Step,
    forceable,
    forced_guards,
    is_forceable,
    refused_guards,
)
from xsm_celery.errors import ConfigurationError
from xsm_celery.ids import new_id

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.api import Workflow
    from xsm_celery.celery.workflow.view import WorkflowView
    from xsm_celery.engine.machine import Machine

__all__ = ["PathCase", "forceable", "path_cases"]


@dataclass(frozen=True)
class PathCase:
    """One generated test: a path of the chart, named for what it reaches or covers.

    Attributes:
        id: The pytest id: the states reached (``paid``, ``a.a2+b.b1``) or the transition
            covered (``created-PAY->paid``).
        path: The steps and the configuration they end in.
    """

    id: str
    path: Path

    def run(self, workflow: Workflow, key: str | None = None) -> WorkflowView:
        """Replay the path on a fresh instance of ``workflow``; return the instance at its end.

        Raises:
            AssertionError: a step led elsewhere than the path says (the message names the
                step, what was expected and what the instance holds).
            ConfigurationError: the path needs a guard forced and the workflow's machine was
                not built with ``forceable()``.
        """
        if any(step.assumptions for step in self.path.steps) and not is_forceable(workflow.machine):
            raise ConfigurationError(
                f"path {self.id!r} needs guards forced "
                f"({_assumed(self.path)}); build the workflow on "
                "xsm_celery.testing.forceable(machine)"
            )
        key = key or f"path-{new_id()}"
        view = workflow.start(key)
        initial = self.path.steps[0].from_states if self.path.steps else self.path.final_states
        self._check(view, initial, "the start")
        for number, step in enumerate(self.path.steps, 1):
            with forced_guards(refused_guards(step.assumptions)):
                _apply(workflow, key, step)
            view = _current(workflow, key)
            self._check(view, step.to_states, f"step {number} ({step.label})")
        return view

    def _check(self, view: WorkflowView, expected: frozenset[str], where: str) -> None:
        if frozenset(view.state_ids) != expected:
            raise AssertionError(
                f"path {self.id!r} [{self.path.event_string()}]: after {where} the instance "
                f"{view.key!r} is in {sorted(view.state_ids)}, the path expects "
                f"{sorted(expected)}"
            )


def path_cases(
    machine: Machine,
    *,
    coverage: bool = False,
    guards: str | GuardPredicate = "both",
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> list[Any]:
    """``pytest.param(PathCase, id=...)`` for every path worth a test, for ``parametrize``.

    Args:
        machine: The workflow's machine (``orders.machine``).
        coverage: One case per transition (a shortest path whose last step takes it)
            instead of one per reachable configuration.
        guards: As for :func:`~xsm_celery.engine.graph.shortest_paths`.
        max_depth: Steps in a path at most.
    """
    prefix = machine.id + "."
    cases: list[PathCase] = []
    if coverage:
        for (source, label, target), path in transition_paths(
            machine, guards=guards, max_depth=max_depth
        ).items():
            name = f"{_short(source, prefix)}-{_short_label(label)}->{_short(target, prefix)}"
            cases.append(PathCase(name, path))
    else:
        for configuration, path in shortest_paths(
            machine, guards=guards, max_depth=max_depth
        ).items():
            name = "+".join(sorted(_short(s, prefix) for s in configuration))
            cases.append(PathCase(name, path))
    return [pytest.param(case, id=case.id) for case in cases]


def _apply(workflow: Workflow, key: str, step: Step) -> None:
    """One step through the workflow's own entry points, in this process."""
    if step.event is None:
        _fire_next_timer(workflow, key)
    elif step.event.startswith(INVOCATION_RESULT_PREFIXES):
        _complete(workflow, key, step.event)
    else:
        workflow.send_now(key, step.event)


def _fire_next_timer(workflow: Workflow, key: str) -> None:
    """Move the instance's deadlines forward until its earliest is due, then fire that one."""
    store_key = workflow.store_key(key)
    snapshots = workflow.stores().snapshots
    record = snapshots.load(store_key)
    if record is None:
        raise AssertionError(f"instance {key!r} is not stored")
    data = json.loads(record.snapshot)
    deadlines = data.get("deadlines") or []
    if not deadlines:
        raise AssertionError(f"instance {key!r} waits for no timer")
    earliest = min(deadlines, key=lambda d: float(d["due_at_wall"]))
    shift = max(0.0, float(earliest["due_at_wall"]) - time.time() + 0.001)
    for deadline in deadlines:
        deadline["due_at_wall"] = float(deadline["due_at_wall"]) - shift
    snapshots.save(store_key, json.dumps(data))
    message = Message(
        new_id(),
        "timer",
        type=str(earliest.get("event_type")),
        payload={"state_id": str(earliest.get("state_id"))},
        due_at=float(earliest["due_at_wall"]),
    )
    workflow.step(key, message)


def _complete(workflow: Workflow, key: str, event: str) -> None:
    """Deliver the result of a task step the instance waits for (done or error)."""
    kind = "done" if event.startswith("done.") else "error"
    invoke_id = event.split(".", 2)[2]
    task_id = _current(workflow, key).waiting_for.get(invoke_id)
    if task_id is None:
        raise AssertionError(f"instance {key!r} does not wait for invocation {invoke_id!r}")
    data: Any = None
    if kind == "error":
        data = {"task": invoke_id, "type": "PathCaseError", "message": "failed by the path"}
    workflow.step(
        key, Message(f"{kind}:{task_id}", kind, invoke=invoke_id, dispatch=task_id, data=data)
    )


def _current(workflow: Workflow, key: str) -> WorkflowView:
    view = workflow.get(key)
    if view is None:
        raise AssertionError(f"instance {key!r} is not stored")
    return view


def _assumed(path: Path) -> str:
    return ", ".join(sorted({a for step in path.steps for a in step.assumptions}))


def _short(state_id: str, prefix: str) -> str:
    return state_id.removeprefix(prefix)


def _short_label(label: str) -> str:
    """A coverage label as an id: ``PAY``, ``after1000``, ``charge.onDone``."""
    if label.startswith("on '"):
        return label[4:-1]
    if label.startswith("invoke '"):
        src, _, outcome = label[8:].partition("' ")
        return f"{src}.{outcome}"
    return label.replace(" ", ".")
