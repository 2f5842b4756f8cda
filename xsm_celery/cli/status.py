"""``status``: what xsm_celery holds and runs now, as rich tables or ``--json``.

Dead letters by reason over the last hour and day, the outbox backlog and the age of its
oldest row, durable timers and how late the earliest is, persisted instances by state, and
the breakers and limits the running workers report. The stores come from the app's
settings (``--app``, or the app ``celery -A`` loaded) and from URLs (or ``"django"``) given
on the command line, which win. A store that cannot be read is shown as an error line of its
own and the exit status is 1, so a cron check notices; everything else is still printed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

from xsm_celery.cli.base import CliError, OneLineCommand
from xsm_celery.cli.render import make_console, when
from xsm_celery.cli.target import command_app, open_existing
from xsm_celery.errors import XsmError
from xsm_celery.metrics.figures import Figures, Sources, read_figures

__all__ = ["EXIT_UNREADABLE", "render_figures", "status"]

#: Some store could not be read (the rest of the report was printed).
EXIT_UNREADABLE = 1


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def render_figures(console: Console, figures: Figures) -> None:
    """Print ``figures`` as one table per part."""
    if figures.dead_letters is not None:
        table = Table(title="Dead letters by reason", box=box.SIMPLE)
        for column in ("reason", "last 1h", "last 24h"):
            table.add_column(column)
        hour, day = figures.dead_letters.get("1h", {}), figures.dead_letters.get("24h", {})
        for reason in sorted(set(hour) | set(day)):
            table.add_row(reason, str(hour.get(reason, 0)), str(day.get(reason, 0)))
        if not day and not hour:
            table.add_row("(none)", "0", "0")
        console.print(table)
    if figures.outbox is not None or figures.timers is not None:
        table = Table(title="Waiting", box=box.SIMPLE)
        for column in ("what", "pending", "oldest / lag", "earliest due"):
            table.add_column(column)
        if figures.outbox is not None:
            table.add_row(
                "outbox rows", str(figures.outbox.pending), _age(figures.outbox.oldest_age_s), ""
            )
            if figures.outbox.failed:
                table.add_row("failed outbox rows (requeue)", str(figures.outbox.failed), "", "")
        if figures.timers is not None:
            timers = figures.timers
            table.add_row(
                "durable timers",
                str(timers.pending),
                _age(timers.lag_s),
                when(timers.earliest_due_at),
            )
        console.print(table)
    if figures.instances is not None:
        title = "Instances by state" + (
            " (first 5000 scanned)" if figures.instances_truncated else ""
        )
        table = Table(title=title, box=box.SIMPLE)
        for column in ("machine", "state", "instances"):
            table.add_column(column)
        for machine, state, count in figures.instances:
            table.add_row(machine, state, str(count))
        console.print(table)
    if figures.workers is not None:
        table = Table(title="Breakers and limits (running workers)", box=box.SIMPLE)
        for column in ("worker", "kind", "name", "state", "detail"):
            table.add_column(column)
        for row in figures.workers:
            detail = " ".join(f"{k}={v:g}" for k, v in sorted(row.detail.items()))
            table.add_row(row.worker, row.kind, row.name, row.state, detail)
        if not figures.workers:
            table.add_row("(no worker answered)", "", "", "", "")
        console.print(table)
    for part, error in sorted(figures.errors.items()):
        console.print(f"[red]{part}: could not read: {error}[/red]")


def _open_urls(
    dlq: str | None, timers: str | None, outbox: str | None, instances: str | None
) -> dict[str, Any]:
    opened: dict[str, Any] = {}
    if dlq:
        opened["dead_letters"] = open_existing(dlq, "dead_letters", "--dlq")
    if timers:
        opened["timers"] = open_existing(timers, "timers", "--timers")
    if outbox:
        opened["outbox"] = open_existing(outbox, "outbox", "--outbox")
    if instances:
        opened["instances"] = open_existing(instances, "snapshots", "--instances")
    return opened


def _sources(app: Any, ask_workers: bool, urls: dict[str, Any]) -> Sources:
    base = Sources()
    if app is not None:
        from xsm_celery.celery.worker.status import sources_for_app

        try:
            base = sources_for_app(app, ask_workers=ask_workers, create=False)
        except XsmError as exc:
            raise CliError(str(exc)) from None
    sources = replace(base, **urls)
    if all(getattr(sources, n) is None for n in ("dead_letters", "outbox", "timers", "instances")):
        raise CliError(
            "no store to read: pass --app module:app (or run: celery -A proj xsm status), "
            "or --dlq / --timers / --outbox / --instances URLs"
        )
    return sources


@click.command(cls=OneLineCommand)
@click.option(
    "--app", "app_spec", metavar="MODULE:APP", help="Celery app whose settings name the stores."
)
@click.option(
    "--dlq", metavar="URL", envvar="XSM_DLQ", help="Dead-letter store: a database URL or 'django'."
)
@click.option("--timers", metavar="URL", help="Durable timer store: a database URL or 'django'.")
@click.option("--outbox", metavar="URL", help="Outbox: a database URL or 'django'.")
@click.option(
    "--instances",
    metavar="URL",
    help="Snapshot store of persisted machines: a database URL or 'django'.",
)
@click.option(
    "--workers/--no-workers",
    default=True,
    show_default=True,
    help="Ask running workers for their breakers and limits (needs an app).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def status(  # noqa: PLR0917 - one parameter per click option
    ctx: click.Context,
    app_spec: str | None,
    dlq: str | None,
    timers: str | None,
    outbox: str | None,
    instances: str | None,
    workers: bool,
    as_json: bool,
) -> None:
    """Dead letters, outbox backlog, timers, instances, breakers and limits, now.

    Exit codes: 0 every store answered, 1 one could not be read, 2 refused input.
    """
    app = command_app(ctx, app_spec)
    urls = _open_urls(dlq, timers, outbox, instances)
    figures = read_figures(_sources(app, workers and app is not None, urls))
    if as_json:
        click.echo(json.dumps(figures.to_dict(), indent=2, sort_keys=True, default=str))
    else:
        render_figures(make_console(), figures)
    if figures.errors:
        ctx.exit(EXIT_UNREADABLE)
