"""What a chart holds, counted: the figures of ``xsm inspect``'s panel and its state tree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xsm_celery.engine.builtins import canonical_builtin
from xsm_celery.engine.events import is_engine_event_type

if TYPE_CHECKING:
    from xsm_celery.engine.chart import GuardDef, StateNode
    from xsm_celery.engine.machine import Machine

__all__ = ["ChartSummary", "summarise", "tree_line"]


@dataclass
class ChartSummary:
    """Counts of one chart; ``kinds`` maps a state type to how many states have it."""

    machine_id: str
    version: str | None
    states: int
    kinds: dict[str, int]
    events: list[str]
    timers: int
    invokes: int
    actions: list[str]
    guards: list[str]
    services: list[str]
    delays: list[str]
    tags: list[str] = field(default_factory=list)


def _guard_names(guard: GuardDef | None, into: set[str]) -> None:
    if guard is None or guard.combinator == "stateIn":
        return
    if guard.combinator is not None:
        for operand in guard.guards:
            _guard_names(operand, into)
        return
    into.add(guard.type)


def summarise(machine: Machine) -> ChartSummary:
    """Count states by kind, user events, timers, invocations and named logic."""
    nodes = [n for n in machine.nodes if n is not machine.root]
    kinds: dict[str, int] = {}
    for node in nodes:
        kinds[node.type] = kinds.get(node.type, 0) + 1
    events = sorted(
        {t.event for t in machine.transitions if t.event and not is_engine_event_type(t.event)}
    )
    actions: set[str] = set()
    for node in machine.nodes:
        actions.update(a.type for a in (*node.entry, *node.exit))
    for trans in machine.transitions:
        actions.update(a.type for a in trans.actions)
    guards: set[str] = set()
    for trans in machine.transitions:
        _guard_names(trans.guard, guards)
    return ChartSummary(
        machine_id=machine.id,
        version=machine.version,
        states=len(nodes),
        kinds=dict(sorted(kinds.items())),
        events=events,
        timers=len(machine.afters),
        invokes=len(machine.invokes),
        actions=sorted(a for a in actions if canonical_builtin(a) is None),
        guards=sorted(guards),
        services=sorted({inv.src for inv in machine.invokes}),
        delays=sorted({a.key for a in machine.afters if a.delay_ms is None}),
        tags=sorted({t for n in machine.nodes for t in n.tags}),
    )


def tree_line(node: StateNode) -> str:
    """One node of the state tree: kind mark, key, initial, timers, invokes and tags."""
    marks = {"compound": "◆", "parallel": "⫴", "final": "◉", "history": "Ⓗ"}
    parts = [f"{marks.get(node.type, '○')} {node.key}"]
    if node.type == "compound" and node.initial is not None:
        parts.append(f"initial={node.initial.key}")
    if node.type == "history":
        parts.append(str(node.history))
    for after in node.after:
        parts.append(f"after {after.key}")
    for inv in node.invoke:
        parts.append(f"invoke {inv.src}")
    parts.extend(f"#{tag}" for tag in sorted(node.tags))
    return "  ".join(parts)
