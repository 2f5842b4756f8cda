"""Logic and plugins the engine tests share."""

from __future__ import annotations

from typing import Any

from xsm_celery import MachineLogic, PluginBase


def note(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Append the action's ``params.text`` to ``context["log"]``: the order actions ran in."""
    ctx.setdefault("log", []).append(action.params["text"])


def count(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Count calls in ``context["flips"]``."""
    ctx["flips"] = ctx.get("flips", 0) + 1


def player_logic(**overrides: Any) -> MachineLogic:
    """Logic for ``tests/charts/player.json``."""
    actions = {
        "note": note,
        "setVolume": lambda i, ctx, e, a: ctx.__setitem__("volume", e.payload["level"]),
        "markSeeked": lambda i, ctx, e, a: ctx.__setitem__("seeked", True),
    }
    guards = {"seekDone": lambda ctx, e: bool(ctx.get("seeked"))}
    logic = MachineLogic(actions=actions, guards=guards)
    return logic.merge(MachineLogic(**overrides)) if overrides else logic


class Recorder(PluginBase):
    """Records every hook call as ``(hook, details)`` tuples, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def names(self) -> list[str]:
        """The hook names called, in order."""
        return [name for name, _ in self.calls]

    def of(self, hook: str) -> list[Any]:
        """The details recorded for one hook."""
        return [details for name, details in self.calls if name == hook]

    def on_interpreter_start(self, i: Any) -> None:
        self.calls.append(("on_interpreter_start", None))

    def on_interpreter_stop(self, i: Any) -> None:
        self.calls.append(("on_interpreter_stop", None))

    def on_event_received(self, i: Any, event: Any) -> None:
        self.calls.append(("on_event_received", event.type))

    def on_event_processed(self, i: Any, event: Any, receipt: Any) -> None:
        self.calls.append(("on_event_processed", (event.type, receipt)))

    def on_event_dropped(self, i: Any, event: Any, reason: str) -> None:
        self.calls.append(("on_event_dropped", (event.type, reason)))

    def on_transition(self, i: Any, from_states: Any, to_states: Any, transition: Any) -> None:
        before = sorted(s.id for s in from_states)
        after = sorted(s.id for s in to_states)
        self.calls.append(("on_transition", (before, after, transition.event)))

    def on_action_execute(self, i: Any, action: Any) -> None:
        self.calls.append(("on_action_execute", action.type))

    def on_action_error(self, i: Any, action: Any, error: BaseException) -> None:
        self.calls.append(("on_action_error", (action.type, error)))

    def on_guard_evaluated(self, i: Any, guard_name: str, event: Any, result: bool) -> None:
        self.calls.append(("on_guard_evaluated", (guard_name, result)))

    def on_guard_error(self, i: Any, guard_name: str, event: Any, error: BaseException) -> None:
        self.calls.append(("on_guard_error", (guard_name, error)))

    def on_service_start(self, i: Any, invocation: Any) -> None:
        self.calls.append(("on_service_start", invocation.src))

    def on_service_done(self, i: Any, invocation: Any, result: Any) -> None:
        self.calls.append(("on_service_done", (invocation.src, result)))

    def on_service_error(self, i: Any, invocation: Any, error: BaseException) -> None:
        self.calls.append(("on_service_error", (invocation.src, error)))

    def on_plugin_error(self, i: Any, plugin: Any, hook: str, error: BaseException) -> None:
        self.calls.append(("on_plugin_error", (type(plugin).__name__, hook, error)))

    def on_done(self, i: Any, output: Any) -> None:
        self.calls.append(("on_done", output))
