"""Chart tools: ``inspect``, ``diagram``, ``simulate``, ``validate`` and ``docs``.

Each takes a chart file (or ``pkg:<name>.json`` for a chart shipped with xsm_celery) and
needs none of the chart's code; ``--logic module[:attr]`` supplies it where it matters.
Exit codes: 0 success; 2 a chart that cannot be read or built (``validate``: any problem),
with one line per problem on stderr naming its path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any

import click
from rich.panel import Panel
from rich.table import Table
from rich.tree import Tree

from xsm_celery.charttools.docs import chart_markdown
from xsm_celery.charttools.problems import find_problems
from xsm_celery.charttools.simulate import simulate as run_simulation
from xsm_celery.charttools.summary import summarise, tree_line
from xsm_celery.charttools.svg import render_chart_svg
from xsm_celery.cli.base import EXIT_REFUSED, CliError, OneLineCommand
from xsm_celery.cli.dispatcher import load_logic
from xsm_celery.cli.render import make_console
from xsm_celery.engine import Machine, create_machine, load_chart
from xsm_celery.engine.mermaid import to_mermaid
from xsm_celery.errors import XsmError

__all__ = ["diagram", "docs", "inspect", "simulate", "validate"]


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
    try:
        steps = run_simulation(config, names, load_logic(logic_spec))
    except XsmError as exc:
        raise ChartCliError("simulate", str(exc)) from None
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
