"""A machine as Mermaid ``stateDiagram-v2`` text (``to_mermaid(machine)``).

Built from the validated machine, not the raw JSON, so targets are drawn where the engine
resolves them. Compound states are nested blocks with their initial arrow, parallel regions
are separated by ``--``, final states point to ``[*]``, and each transition is labelled with
its event (``after 1000``, ``onDone``, ``onError``, ``always``), its guard in brackets and
its actions after a slash.

It lives in the engine because ``Machine.to_mermaid()`` is engine API (0.11.0 has it);
:mod:`xsm_celery.charttools` re-exports it beside the other chart tools.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xsm_celery.engine.chart import GuardDef, StateNode, Transition
    from xsm_celery.engine.machine import Machine

__all__ = ["event_label", "to_mermaid", "transition_label"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def _sid(node: StateNode) -> str:
    return _UNSAFE.sub("_", node.id)


def _guard_text(guard: GuardDef) -> str:
    if guard.combinator == "stateIn":
        return f"in {guard.state_ref}"
    if guard.combinator == "not":
        return f"not {_guard_text(guard.guards[0])}"
    if guard.combinator in ("and", "or"):
        return f" {guard.combinator} ".join(_guard_text(g) for g in guard.guards)
    return guard.type


def event_label(trans: Transition) -> str:
    """How a transition's event reads on a diagram."""
    event = trans.event
    source = trans.source.id
    if not event:
        return "always"
    if event.startswith("after."):
        return "after " + event.removeprefix("after.").removesuffix(f".{source}")
    if event.startswith("done.invoke."):
        return "onDone"
    if event.startswith("error.platform."):
        return "onError"
    if event.startswith("done.state."):
        return "onDone"
    return event


def transition_label(trans: Transition) -> str:
    """``EVENT [guard] / action, action``."""
    label = event_label(trans)
    if trans.guard is not None:
        label += f" [{_guard_text(trans.guard)}]"
    if trans.actions:
        label += " / " + ", ".join(a.type for a in trans.actions)
    return label


def _block(node: StateNode, depth: int, lines: list[str]) -> None:
    pad = "    " * depth
    regions = node.children
    for index, child in enumerate(regions):
        if node.type == "parallel" and index:
            lines.append(f"{pad}--")
        _declare(child, depth, lines)
    for hist in node.history_children:
        star = "H*" if hist.history == "deep" else "H"
        lines.append(f'{pad}state "{star}" as {_sid(hist)}')
    if node.type == "compound" and node.initial is not None:
        lines.append(f"{pad}[*] --> {_sid(node.initial)}")
    for child in regions:
        if child.type == "final":
            lines.append(f"{pad}{_sid(child)} --> [*]")


def _declare(node: StateNode, depth: int, lines: list[str]) -> None:
    pad = "    " * depth
    if node.children:
        lines.append(f'{pad}state "{node.key}" as {_sid(node)} {{')
        _block(node, depth + 1, lines)
        lines.append(f"{pad}}}")
    else:
        lines.append(f'{pad}state "{node.key}" as {_sid(node)}')


def to_mermaid(machine: Machine) -> str:
    """The machine as Mermaid ``stateDiagram-v2`` text (ends with a newline)."""
    lines = ["stateDiagram-v2"]
    root = machine.root
    _block(root, 1, lines)
    for trans in machine.transitions:
        label = transition_label(trans)
        for target in trans.targets or ():
            lines.append(f"    {_sid(trans.source)} --> {_sid(target)} : {label}")
    return "\n".join(lines) + "\n"
