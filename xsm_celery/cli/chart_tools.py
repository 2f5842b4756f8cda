"""Chart tools: ``inspect``, ``diagram``, ``simulate``, ``validate``, ``docs`` and ``paths``.

Each takes a chart file (or ``pkg:<name>.json`` for a chart shipped with xsm_celery) and
needs none of the chart's code; ``--logic module[:attr]`` supplies it where it matters.
Exit codes: 0 success; 2 a chart that cannot be read or built (``validate``: any problem),
with one line per problem on stderr naming its path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import click
from rich.panel import Panel
from rich.table import Table
from rich.tree import Tree

from xsm_celery.charttools.docs import chart_markdown
from xsm_celery.charttools.problems import find_problems
from xsm_celery.charttools.simulate import UnresolvedDelayError
from xsm_celery.charttools.simulate import simulate as run_simulation
from xsm_celery.charttools.summary import summarise, tree_line
from xsm_celery.charttools.svg import render_chart_svg
from xsm_celery.cli.base import EXIT_REFUSED, CliError, OneLineCommand
from xsm_celery.cli.dispatcher import load_logic
from xsm_celery.cli.render import make_console
from xsm_celery.engine import Machine, create_machine, load_chart
from xsm_celery.engine.graph import (
    DEFAULT_MAX_DEPTH,
    GUARD_MODES,
    shortest_paths,
    transition_coverage_targets,
    transition_paths,
)
from xsm_celery.engine.graph_model import Path as ChartPath
from xsm_celery.engine.mermaid import to_mermaid
from xsm_celery.errors import XsmError

__all__ = ["diagram", "docs", "inspect", "paths", "simulate", "validate"]


class ChartCliError(CliError):
    """A refused chart: ``xsm <command>: error: <message>`` on one line, exit 2."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(message)
        self.command = command

    def show(self, file: IO[Any] | None = None) -> None:
        """Print the one-line error."""
        message = " ".join(self.format_message().split())
        click.echo(f"xsm {self.command}: error: {message}", err=True, file=file)


def _chart(command: str, source: str) -> dict[str, Any]:
    try:
        return load_chart(source)
    except XsmError as exc:
        raise ChartCliError(command, str(exc)) from None


def _machine(command: str, source: str, logic_spec: str | None = None) -> Machine:
    chart = _chart(command, source)
    try:
        return create_machine(chart, logic=load_logic(logic_spec))
    except XsmError as exc:
        raise ChartCliError(command, str(exc)) from None


def _write(text: str, output: str | None) -> None:
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
    else:
        Path(output).write_text(text, "utf-8")


_CHART = click.argument("chart")
_LOGIC = click.option(
    "--logic",
    "logic_spec",
    metavar="MODULE[:ATTR]",
    help="A module whose 'logic' (or ATTR) is the chart's MachineLogic.",
)


@click.command(cls=OneLineCommand)
@_CHART
@_LOGIC
def inspect(chart: str, logic_spec: str | None) -> None:
    """Summarise a chart: states by kind, events, timers, invokes, logic, and the state tree."""
    machine = _machine("inspect", chart, logic_spec)
    summary = summarise(machine)
    grid = Table.grid(padding=(0, 2))
    kinds = "  ".join(f"{kind} {count}" for kind, count in summary.kinds.items())
    grid.add_row("Machine", machine.id, "Version", machine.version or "-")
    grid.add_row("States", f"{summary.states}  {kinds}", "", "")
    grid.add_row("Events", str(len(summary.events)), "Timers", str(summary.timers))
    grid.add_row("Invokes", str(summary.invokes), "Hash", machine.structure_hash)
    grid.add_row(
        "Logic",
        f"{len(summary.actions)} actions · {len(summary.guards)} guards · "
        f"{len(summary.services)} services · {len(summary.delays)} named delays",
        "",
        "",
    )
    console = make_console()
    console.print(Panel(grid, title="inspect", subtitle=Path(chart).name, expand=False))
    tree = Tree(tree_line(machine.root))
    _grow(tree, machine.root)
    console.print("state tree")
    console.print(tree)
    if machine.missing and logic_spec:
        for kind, name, path in machine.missing:
            console.print(f"missing {kind} {name!r} at {path}")


def _grow(branch: Tree, node: Any) -> None:
    for child in (*node.children, *node.history_children):
        _grow(branch.add(tree_line(child)), child)


@click.command(cls=OneLineCommand)
@_CHART
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "svg"]),
    default="mermaid",
    show_default=True,
    help="Mermaid stateDiagram-v2 text, or the admin's SVG.",
)
@click.option("--marked", metavar="STATE", help="SVG: the state id to highlight.")
@click.option("--output", "-o", metavar="FILE", help="Write to FILE instead of stdout.")
def diagram(chart: str, fmt: str, marked: str | None, output: str | None) -> None:
    """Draw a chart as Mermaid text or as SVG."""
    machine = _machine("diagram", chart)
    if fmt == "svg":
        _write(render_chart_svg(machine.config, marked=marked) + "\n", output)
    else:
        _write(to_mermaid(machine), output)


@click.command(cls=OneLineCommand)
@_CHART
@click.option("--events", required=True, metavar="A,B,...", help="Events to send, in order.")
@_LOGIC
@click.option("--json", "as_json", is_flag=True, help="One JSON object per step.")
def simulate(chart: str, events: str, logic_spec: str | None, as_json: bool) -> None:
    """Start a chart and send events, printing each step's state and context.

    Names the logic does not give are stubbed: actions do nothing, guards pass, services
    return None, named delays stay unresolved.
    """
    config = _chart("simulate", chart)
    names = [e.strip() for e in events.split(",") if e.strip()]
    logic = load_logic(logic_spec)
    try:
        unresolved = _unresolved_delays(config, logic)
        with _quiet_unresolved_delays():
            steps = run_simulation(config, names, logic)
    except XsmError as exc:
        raise ChartCliError("simulate", str(exc)) from None
    if unresolved:
        click.echo(
            f"xsm simulate: note: named delays left unresolved, their timers are not armed "
            f"(give them with --logic): {', '.join(unresolved)}",
            err=True,
        )
    for step in steps:
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "event": step.event,
                        "states": list(step.states),
                        "context": step.context,
                        "error": step.error,
                    },
                    default=str,
                    sort_keys=True,
                )
            )
            continue
        context = json.dumps(step.context, default=str)
        line = f"{step.event:<16} -> {', '.join(step.states)}  {context}"
        click.echo(line + (f"  ! {step.error}" if step.error else ""))
    click.echo(f"# -> {', '.join(steps[-1].states)}")


def _unresolved_delays(config: dict[str, Any], logic: Any) -> list[str]:
    """The named delays of the chart that ``logic`` does not give, each once, sorted."""
    missing = create_machine(config, logic=logic).missing
    return sorted({name for kind, name, _ in missing if kind == "delay"})


class _DropUnresolvedDelays(logging.Filter):
    """Drop the engine's "delay failed" record for a stub delay: the note says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, UnresolvedDelayError)


@contextlib.contextmanager
def _quiet_unresolved_delays() -> Iterator[None]:
    engine_logger = logging.getLogger("xsm_celery.engine")
    drop = _DropUnresolvedDelays()
    engine_logger.addFilter(drop)
    try:
        yield
    finally:
        engine_logger.removeFilter(drop)


@click.command(cls=OneLineCommand)
@_CHART
@click.option(
    "--strict",
    is_flag=True,
    help="Also refuse unknown keys (and, with --logic, every name the logic lacks).",
)
@_LOGIC
def validate(chart: str, strict: bool, logic_spec: str | None) -> None:
    """Check a chart; print every problem with its path and exit 2 if there is any."""
    config = _chart("validate", chart)
    problems = find_problems(config, strict=strict, logic=load_logic(logic_spec))
    if not problems:
        click.echo(f"{chart}: valid")
        return
    for problem in problems:
        click.echo(f"{problem.path or '<root>'}: {problem.kind}: {problem.message}", err=True)
    click.echo(f"{chart}: {len(problems)} problem(s)", err=True)
    sys.exit(EXIT_REFUSED)


@click.command(cls=OneLineCommand)
@_CHART
@click.option("--output", "-o", metavar="FILE", help="Write to FILE instead of stdout.")
def docs(chart: str, output: str | None) -> None:
    """Write a Markdown page for a chart: diagram, states, events and publications."""
    _write(chart_markdown(_machine("docs", chart)), output)


@click.command(cls=OneLineCommand)
@_CHART
@click.option(
    "--coverage",
    is_flag=True,
    help="One path per transition (ending in it) instead of one per reachable configuration.",
)
@click.option(
    "--guards",
    type=click.Choice(GUARD_MODES),
    default="both",
    show_default=True,
    help="How guards answer: each way (recorded per step), always true, or always false.",
)
@click.option(
    "--max-depth",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_DEPTH,
    show_default=True,
    help="Steps in a path at most.",
)
@_LOGIC
@click.option("--json", "as_json", is_flag=True, help="One JSON object per path.")
def paths(
    chart: str,
    *,
    coverage: bool,
    guards: str,
    max_depth: int,
    logic_spec: str | None,
    as_json: bool,
) -> None:
    """Print the shortest path to every reachable configuration (or through every transition).

    A step is an event, ``+MS`` (time passes until the next timer fires) or an
    invocation's ``done.invoke.<id>`` / ``error.platform.<id>``; ``[guard:x=False]`` names
    the guard answers a path needs. Only the chart's delays come from --logic.
    """
    machine = _machine("paths", chart, logic_spec)
    prefix = machine.id + "."
    try:
        if coverage:
            found = transition_paths(machine, guards=guards, max_depth=max_depth)
            rows = [
                (f"{_short(s, prefix)} --{label}--> {_short(t, prefix)}", [s, label, t], path)
                for (s, label, t), path in found.items()
            ]
            missed = sorted(transition_coverage_targets(machine) - set(found))
        else:
            reached = shortest_paths(machine, guards=guards, max_depth=max_depth)
            rows = [
                (", ".join(sorted(_short(s, prefix) for s in states)), sorted(states), path)
                for states, path in reached.items()
            ]
            missed = []
    except XsmError as exc:
        raise ChartCliError("paths", str(exc)) from None
    width = max((len(name) for name, _, _ in rows), default=0)
    for name, key, path in rows:
        if as_json:
            field = "transition" if coverage else "states"
            click.echo(json.dumps({field: key, **_path_json(path)}, sort_keys=True))
        else:
            click.echo(f"{name:<{width}}  {_path_line(path)}")
    for source, label, target in missed:
        line = f"{_short(source, prefix)} --{label}--> {_short(target, prefix)}"
        if as_json:
            click.echo(json.dumps({"transition": [source, label, target], "steps": None}))
        else:
            click.echo(f"# not taken within {max_depth} steps: {line}")


def _short(state_id: str, prefix: str) -> str:
    return state_id.removeprefix(prefix) if state_id != prefix[:-1] else state_id


def _path_line(path: ChartPath) -> str:
    assumed = sorted({a for step in path.steps for a in step.assumptions})
    line = path.event_string() or "(start)"
    return line + (f"  [{', '.join(assumed)}]" if assumed else "")


def _path_json(path: ChartPath) -> dict[str, Any]:
    return {
        "steps": [
            {
                "event": step.event,
                "delay_ms": step.delay_ms,
                "to": sorted(step.to_states),
                "assumptions": list(step.assumptions),
            }
            for step in path.steps
        ],
        "events": path.event_string(),
    }
