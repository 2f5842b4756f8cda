"""Engine queries: where a pending timer would lead, and a restart that keeps a context."""

from __future__ import annotations

from typing import Any

import pytest

from xsm_celery import MachineLogic, PluginBase, SimulatedClock, SyncInterpreter, create_machine
from xsm_celery.engine.queries import (
    fresh_interpreter,
    next_timer,
    timer_entries,
    timer_transitions,
)

CHART: dict[str, Any] = {
    "id": "job",
    "initial": "waiting",
    "context": {"tries": 0},
    "states": {
        "waiting": {
            "entry": "countEntry",
            "after": {
                "pause": [
                    {"guard": "again", "target": "working"},
                    {"target": "failed"},
                ]
            },
        },
        "working": {"type": "final"},
        "failed": {"type": "final", "tags": ["dead-letter"]},
    },
}


def _machine(again: Any) -> Any:
    logic = MachineLogic(
        actions={
            "countEntry": lambda i, ctx, e, a: ctx.__setitem__("entries", ctx.get("entries", 0) + 1)
        },
        guards={"again": again},
        delays={"pause": lambda ctx, e: 1000.0},
    )
    return create_machine(CHART, logic=logic)


def _started(again: Any, **context: Any) -> SyncInterpreter:
    machine = _machine(again)
    return fresh_interpreter(
        SyncInterpreter, machine, {"tries": 0, **context}, SimulatedClock()
    ).start()


def test_timer_transitions_follow_the_guard_that_passes() -> None:
    """The first candidate whose guard passes is the answer, read from the context."""
    interp = _started(lambda ctx, e: ctx["tries"] < 3)
    assert [n.key for n in timer_entries(interp)] == ["working"]
    interp.context["tries"] = 3
    assert [n.key for n in timer_entries(interp)] == ["failed"]


def test_the_query_agrees_with_firing_the_timer() -> None:
    """Asking, then firing, ends in the state the query named, and asking moved nothing."""
    interp = _started(lambda ctx, e: False)
    predicted = {n.id for n in timer_entries(interp)}
    assert interp.current_state_ids == {"job.waiting"}
    timer = next_timer(interp)
    assert timer is not None
    assert timer.delay_ms == 1000.0
    interp.clock.increment(1000.0)  # type: ignore[attr-defined]
    assert interp.current_state_ids == predicted == {"job.failed"}


def test_no_pending_timer_means_no_transition() -> None:
    """A machine that waits on nothing answers with an empty tuple."""
    interp = _started(lambda ctx, e: True)
    interp.clock.increment(1000.0)  # type: ignore[attr-defined]
    assert next_timer(interp) is None
    assert timer_transitions(interp) == ()


class _Guards(PluginBase):
    def __init__(self) -> None:
        self.evaluated: list[tuple[str, bool]] = []
        self.errors: list[str] = []

    def on_guard_evaluated(self, interp: Any, guard: str, event: Any, result: bool) -> None:
        self.evaluated.append((guard, result))

    def on_guard_error(self, interp: Any, guard: str, event: Any, error: Exception) -> None:
        self.errors.append(type(error).__name__)


def test_a_raising_guard_is_false_and_reported_like_any_guard(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The query uses the engine's guard path: a raising guard is logged, reported and false."""

    def broken(ctx: Any, event: Any) -> bool:
        raise KeyError("missing")

    interp = _started(broken)
    plugin = _Guards()
    interp.use(plugin)
    assert [n.key for n in timer_entries(interp)] == ["failed"]
    assert plugin.errors == ["KeyError"]
    assert plugin.evaluated == [("again", False)]
    assert "guard 'again' raised" in caplog.text


def test_fresh_interpreter_keeps_the_context_and_runs_entry_again() -> None:
    """A restart starts from the initial state with the given context, copied, not shared."""
    given = {"tries": 2, "errors": [{"type": "ValueError"}]}
    machine = _machine(lambda ctx, e: True)
    interp = fresh_interpreter(SyncInterpreter, machine, given, SimulatedClock())
    assert interp.status == "not_started"
    interp.start()
    assert interp.current_state_ids == {"job.waiting"}
    assert interp.context["tries"] == 2
    assert interp.context["entries"] == 1
    interp.context["errors"].append("more")
    assert given == {"tries": 2, "errors": [{"type": "ValueError"}]}
