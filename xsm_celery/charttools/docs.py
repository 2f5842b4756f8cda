"""A chart as a Markdown page (``xsm docs``): diagram, states, events and publications.

Publications are what the chart sends out of itself: ``emit``, ``sendParent`` and
``sendTo`` built-ins, and any ``meta.publishes`` list a state declares for an event bus.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xsm_celery.charttools.summary import summarise
from xsm_celery.engine.builtins import canonical_builtin
from xsm_celery.engine.mermaid import event_label, to_mermaid, transition_label

if TYPE_CHECKING:
    from xsm_celery.engine.chart import ActionDef
    from xsm_celery.engine.machine import Machine

__all__ = ["chart_markdown"]

_OUTBOUND = ("emit", "sendParent", "sendTo")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _publications(machine: Machine) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []

    def outbound(where: str, actions: tuple[ActionDef, ...]) -> None:
        for action in actions:
            canonical = canonical_builtin(action.type)
            if canonical in _OUTBOUND and isinstance(action.params, dict):
                event = action.params.get("event")
                name = event.get("type") if isinstance(event, dict) else event
                to = action.params.get("to", "parent" if canonical == "sendParent" else "listeners")
                found.append((where, f"{canonical} {name}", str(to)))

    for node in machine.nodes:
        outbound(f"{node.id} entry", node.entry)
        outbound(f"{node.id} exit", node.exit)
        for topic in node.meta.get("publishes", []) if isinstance(node.meta, dict) else []:
            found.append((node.id, "meta.publishes", str(topic)))
    for trans in machine.transitions:
        outbound(f"{trans.source.id} on {event_label(trans)}", trans.actions)
    return found


def chart_markdown(machine: Machine, *, title: str | None = None) -> str:
    """The Markdown page of one chart."""
    summary = summarise(machine)
    description = machine.root.description or machine.config.get("description")
    lines = [f"# {title or machine.id}", ""]
    if isinstance(description, str) and description:
        lines += [description, ""]
    kinds = ", ".join(f"{count} {kind}" for kind, count in summary.kinds.items())
    lines += [
        f"Machine `{machine.id}`, version {machine.version or '-'}, structure hash "
        f"`{machine.structure_hash}`: {summary.states} states ({kinds}), "
        f"{len(summary.events)} events, {summary.timers} timers, {summary.invokes} invocations.",
        "",
        "```mermaid",
        to_mermaid(machine).rstrip("\n"),
        "```",
        "",
        "## States",
        "",
        "| state | type | tags | entry | exit | description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for node in machine.nodes:
        if node is machine.root:
            continue
        lines.append(
            f"| `{node.id}` | {node.type} | {_cell(', '.join(sorted(node.tags)))} | "
            f"{_cell(', '.join(a.type for a in node.entry))} | "
            f"{_cell(', '.join(a.type for a in node.exit))} | {_cell(node.description or '')} |"
        )
    lines += ["", "## Events", "", "| from | transition | to |", "| --- | --- | --- |"]
    for trans in machine.transitions:
        targets = ", ".join(f"`{t.id}`" for t in trans.targets) or "(stays)"
        lines.append(f"| `{trans.source.id}` | {_cell(transition_label(trans))} | {targets} |")
    lines += ["", "## Publications", ""]
    publications = _publications(machine)
    if publications:
        lines += ["| where | what | to |", "| --- | --- | --- |"]
        lines += [f"| {_cell(w)} | {_cell(what)} | {_cell(to)} |" for w, what, to in publications]
    else:
        lines.append("None: the chart sends nothing out of itself.")
    return "\n".join(lines) + "\n"
