"""``dlq``: list, show, replay, resolve and purge dead letters.

Exit codes: 0 success; 1 a real replay ran and its outcome was not a success; 2 refused
input (a missing store file or table, an unsupported URL, an unknown id, a bad
``--older-than`` or ``--limit``, a missing ``--yes`` or ``--reason``, a refused replay).
Errors are one line on stderr, so ``--json`` output stays parseable.

Guard rails: ``replay`` is a dry run unless ``--no-dry-run`` is given, and a real replay,
a resolve and a purge each need ``--yes`` and a ``--reason``; all three write an audit row.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from xsm_celery import operators
from xsm_celery.cli.base import EXIT_REPLAY_FAILED, CliError, OneLineGroup
from xsm_celery.cli.render import dead_letter_detail, dead_letters_table, make_console
from xsm_celery.cli.replay import ReplayOptions, ReplayReport, replay_record
from xsm_celery.cli.target import DlqTarget
from xsm_celery.errors import XsmError
from xsm_celery.operators import PURGE_ALL, current_actor
from xsm_celery.patterns.dead_letter import purge_resolved_older_than

__all__ = ["dlq", "parse_age"]

#: The most records one ``list`` prints (a larger ``--limit`` is refused, not sent to SQL).
MAX_LIST_LIMIT = 100_000


def parse_age(text: str) -> float:
    """``90s``, ``15m``, ``12h``, ``30d`` or ``2w`` as seconds (see ``operators.parse_age``).

    Raises:
        CliError: the text is not a number followed by one of s, m, h, d, w.
    """
    try:
        return operators.parse_age(text)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False))


def _target(ctx: click.Context) -> DlqTarget:
    target = ctx.find_object(DlqTarget)
    if target is None:  # only when a command is invoked outside its group
        raise CliError("internal: the dlq group did not run")
    return target


def _require_reason(reason: str | None, action: str) -> str:
    if reason is None or not reason.strip():
        raise CliError(f'{action} needs --reason "why this is safe now" (it is audited)')
    return reason.strip()


def _require_yes(yes: bool, action: str) -> None:
    if not yes:
        raise CliError(f"refusing to {action} without --yes")


def _get_record(target: DlqTarget, record_id: str) -> Any:
    record = _call(target.store().get, record_id)
    if record is None:
        raise CliError(f"no dead letter with id {record_id!r}")
    return record


def _call(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a store operation; a library error becomes a one-line refusal."""
    try:
        return function(*args, **kwargs)
    except (XsmError, ValueError) as exc:
        raise CliError(str(exc)) from None


@click.group(cls=OneLineGroup)
@click.option(
    "--dlq",
    "dlq_url",
    metavar="URL",
    envvar="XSM_DLQ",
    help="Dead-letter store: sqlite:///rel.db, sqlite:////abs.db, postgresql://... "
    "(default: the app's xsm_dead_letter_store).",
)
@click.option(
    "--app",
    "app_spec",
    metavar="MODULE:APP",
    help="Celery app for task replays and for the store setting.",
)
@click.pass_context
def dlq(ctx: click.Context, dlq_url: str | None, app_spec: str | None) -> None:
    """List, show, replay, resolve and purge dead letters.

    Exit codes: 0 success, 1 a real replay ran and failed, 2 refused input.
    """
    root = ctx.find_root().obj
    celery_app = getattr(root, "app", None) if root is not None else None
    target = DlqTarget(dlq_url=dlq_url, app_spec=app_spec, celery_app=celery_app)
    ctx.obj = target
    ctx.call_on_close(target.close)


@dlq.command("list")
@click.option("--all", "include_resolved", is_flag=True, help="Include resolved records.")
@click.option("--limit", type=int, default=100, show_default=True, help="Most records shown.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {count, dead_letters}.")
@click.pass_context
def list_(ctx: click.Context, include_resolved: bool, limit: int, as_json: bool) -> None:
    """Dead letters, newest first (unresolved only unless --all)."""
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise CliError(f"--limit must be from 1 to {MAX_LIST_LIMIT}, got {limit}")
    store = _target(ctx).store()
    records = _call(store.list, limit=limit, include_resolved=include_resolved)
    if as_json:
        _echo_json({"count": len(records), "dead_letters": [r.to_dict() for r in records]})
        return
    console = make_console()
    if not records:
        console.print("no dead letters" + ("" if include_resolved else " (unresolved)"))
        return
    console.print(dead_letters_table(records, title=f"dead letters ({len(records)})"))


@dlq.command()
@click.argument("record_id")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@click.pass_context
def show(ctx: click.Context, record_id: str, as_json: bool) -> None:
    """One dead letter: fields, error chain, redacted arguments and snapshot, audit."""
    target = _target(ctx)
    record = _get_record(target, record_id)
    if as_json:
        _echo_json(record.to_dict())
        return
    audit = _call(target.store().audit_log, record.id)
    make_console().print(dead_letter_detail(record, audit))


@dlq.command()
@click.argument("record_id")
@click.option(
    "--dry-run/--no-dry-run",
    default=True,
    show_default=True,
    help="Only say what would happen (the default).",
)
@click.option("--yes", is_flag=True, help="Confirm a real replay.")
@click.option("--reason", help="Why replaying is safe now (audited; needed for a real replay).")
@click.option("--force", is_flag=True, help="Replay even though the chart changed since capture.")
@click.option("--actor", help="Who replays (default: the login name).")
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    help="State store of the machines (envelope dead letters).",
)
@click.option(
    "--machine",
    "machines",
    multiple=True,
    metavar="FILE",
    help="Chart JSON that handles the envelope (repeatable; envelope dead letters).",
)
@click.option(
    "--logic",
    metavar="MODULE[:ATTR]",
    help="Module whose `logic` (or ATTR) is the charts' MachineLogic.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the replay result as JSON.")
@click.pass_context
def replay(
    ctx: click.Context,
    *,
    record_id: str,
    dry_run: bool,
    yes: bool,
    reason: str | None,
    force: bool,
    actor: str | None,
    store_url: str | None,
    machines: tuple[str, ...],
    logic: str | None,
    as_json: bool,
) -> None:
    """Send a dead letter back (a dry run unless --no-dry-run --yes --reason)."""
    if not dry_run:
        _require_yes(yes, "replay")
        reason = _require_reason(reason, "a real replay")
    target = _target(ctx)
    record = _get_record(target, record_id)
    options = ReplayOptions(
        dry_run=dry_run,
        reason=(reason or "dry run").strip(),
        force=force,
        actor=actor,
        store_url=store_url,
        machines=machines,
        logic=logic,
    )
    _report_replay(replay_record(target, record, options), dry_run=dry_run, as_json=as_json)


def _report_replay(report: ReplayReport, *, dry_run: bool, as_json: bool) -> None:
    for warning in (*report.warnings, *(report.data.get("warnings") or ())):
        click.echo(f"xsm dlq: warning: {warning}", err=True)
    record_id, outcome = report.data.get("record_id"), report.data.get("outcome", "")
    if as_json:
        _echo_json(report.data)
    else:
        click.echo(f"{record_id}: {outcome}")
        if report.data.get("workflow"):
            click.echo(
                f"{record_id}: workflow {report.data['workflow']}, "
                f"key {report.data.get('key') or '?'}"
            )
        if dry_run:
            click.echo(
                "dry run: nothing was sent or changed; replay for real with "
                "--no-dry-run --yes --reason ..."
            )
    if not report.succeeded:
        raise click.exceptions.Exit(EXIT_REPLAY_FAILED)


@dlq.command()
@click.argument("record_id")
@click.option("--yes", is_flag=True, help="Confirm.")
@click.option("--reason", help="Why the record needs no replay (audited).")
@click.option("--actor", help="Who resolves (default: the login name).")
@click.pass_context
def resolve(
    ctx: click.Context, record_id: str, yes: bool, reason: str | None, actor: str | None
) -> None:
    """Mark a dead letter resolved without replaying it (fixed by hand)."""
    _require_yes(yes, "resolve")
    why = _require_reason(reason, "resolve")
    target = _target(ctx)
    store = target.store()
    _get_record(target, record_id)
    _call(store.mark_resolved, record_id)
    _audit(store, record_id, "resolve", actor=actor, reason=why, outcome="resolved")
    click.echo(f"{record_id}: resolved")


@dlq.command()
@click.option(
    "--older-than",
    "older_than",
    metavar="AGE",
    help="Delete records taken more than AGE ago (90s, 15m, 12h, 30d, 2w).",
)
@click.option("--id", "record_id", help="Delete this one record instead.")
@click.option("--yes", is_flag=True, help="Confirm.")
@click.option("--reason", help="Why (audited), e.g. retention.")
@click.option("--actor", help="Who purges (default: the login name).")
@click.option(
    "--include-unresolved",
    is_flag=True,
    help="With --older-than, delete unresolved records too (default: resolved only).",
)
@click.option("--json", "as_json", is_flag=True, help="Print {deleted: n} as JSON.")
@click.pass_context
def purge(
    ctx: click.Context,
    *,
    older_than: str | None,
    record_id: str | None,
    yes: bool,
    reason: str | None,
    actor: str | None,
    include_unresolved: bool,
    as_json: bool,
) -> None:
    """Delete old resolved dead letters (all of them with --include-unresolved); audited."""
    if (older_than is None) == (record_id is None):
        raise CliError("purge needs exactly one of --older-than AGE or --id ID")
    age = parse_age(older_than) if older_than is not None else None
    _require_yes(yes, "purge")
    why = _require_reason(reason, "purge")
    store = _target(ctx).store()
    if age is not None:
        cutoff = time.time() - age
        if include_unresolved:
            deleted = int(_call(store.purge_older_than, cutoff))
            which = ""
        else:
            deleted = int(_call(purge_resolved_older_than, store, cutoff))
            which = " resolved"
        outcome = f"deleted {deleted}{which} record(s) older than {older_than}"
        _audit(store, PURGE_ALL, "purge", actor=actor, reason=why, outcome=outcome)
    else:
        assert record_id is not None
        deleted = 1 if _call(store.delete, record_id) else 0
        if not deleted:
            raise CliError(f"no dead letter with id {record_id!r}")
        _audit(store, record_id, "purge", actor=actor, reason=why, outcome="deleted")
    if as_json:
        _echo_json({"deleted": deleted})
    else:
        click.echo(f"purged {deleted} dead letter(s)")


def _audit(
    store: Any, record_id: str, action: str, *, actor: str | None, reason: str, outcome: str
) -> None:

    _call(
        store.audit, record_id, action, actor=current_actor(actor), reason=reason, outcome=outcome
    )
