"""``breakers``: list the fleet's breakers, rate limiters and slot pools; reset one, audited.

::

    xsm-celery breakers --app proj.celery:app            # or: celery -A proj xsm breakers
    xsm-celery breakers --app proj.celery:app --json
    xsm-celery breakers --app proj.celery:app reset payments --reason "provider back" --yes
    xsm-celery breakers digest sk_live_...             # the #digest a keyed limit's name shows

The Redis is ``--redis URL`` (or ``XSM_REDIS_URL``), else the app's ``xsm_redis_url`` (or its
Redis broker); breaker thresholds come from the app's ``xsm_breakers``. A reset needs
``--yes`` and a ``--reason`` and is written to the dead-letter store's audit trail (``--dlq``
or the app's ``xsm_dead_letter_store``), next to replays and purges. Exit codes: 0 success,
2 refused input (no Redis, unknown name, missing ``--reason`` or ``--yes``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import click

from xsm_celery.cli.base import CliError, OneLineGroup
from xsm_celery.cli.render import make_console
from xsm_celery.cli.target import DlqTarget
from xsm_celery.errors import XsmError

__all__ = ["breakers"]


@dataclass
class FleetTarget:
    """The Redis, prefix and breaker settings one invocation works on."""

    redis_url: str | None
    prefix: str | None
    dlq: DlqTarget
    _store: Any = field(default=None, repr=False)

    def settings(self) -> Any:
        """The app's fleet settings, or None without an app."""
        if not (self.dlq.app_spec or self.dlq.celery_app is not None):
            return None
        app = self.dlq.app(needed_for="reading the fleet settings")
        from xsm_celery.celery.fleet.plan import fleet_settings

        try:
            return fleet_settings(app)
        except XsmError as exc:
            raise CliError(str(exc)) from None

    def store(self) -> Any:
        """The fleet's Redis (``FleetRedis``)."""
        if self._store is None:
            settings = self.settings()
            url = self.redis_url or (settings.redis_url if settings else None)
            if url is None:
                raise CliError(
                    "no fleet Redis: pass --redis redis://host:6379/0, set XSM_REDIS_URL, or "
                    "--app module:app whose xsm_redis_url (or broker) is Redis"
                )
            prefix = self.prefix or (settings.prefix if settings else "xsm:fleet:")
            from xsm_celery.redis.fleet_store import FleetRedis

            self._store = FleetRedis(url, prefix=prefix)
        return self._store

    def breaker_config(self) -> dict[str, Any]:
        """``xsm_breakers`` of the app, or nothing."""
        settings = self.settings()
        return dict(settings.breakers) if settings else {}


def _target(ctx: click.Context) -> FleetTarget:
    target = ctx.find_object(FleetTarget)
    if target is None:
        raise CliError("internal: the breakers group did not run")
    return target


def _call(function: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except (XsmError, ValueError) as exc:
        raise CliError(str(exc)) from None


@click.group(cls=OneLineGroup, invoke_without_command=True)
@click.option(
    "--redis",
    "redis_url",
    metavar="URL",
    envvar="XSM_REDIS_URL",
    help="The fleet's Redis (default: the app's xsm_redis_url or Redis broker).",
)
@click.option("--prefix", metavar="PREFIX", help="Key prefix (default: the app's, xsm:fleet:).")
@click.option("--app", "app_spec", metavar="MODULE:APP", help="Celery app for the settings.")
@click.option(
    "--dlq",
    "dlq_url",
    metavar="URL",
    envvar="XSM_DLQ",
    help="Dead-letter store whose audit trail records resets.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {count, fleet}.")
@click.pass_context
def breakers(  # noqa: PLR0917 - click passes every option positionally
    ctx: click.Context,
    redis_url: str | None,
    prefix: str | None,
    app_spec: str | None,
    dlq_url: str | None,
    as_json: bool,
) -> None:
    """Fleet breakers, rate limiters and slot pools with their state; reset NAME.

    Exit codes: 0 success, 2 refused input.
    """
    root = ctx.find_root().obj
    celery_app = getattr(root, "app", None) if root is not None else None
    dlq = DlqTarget(dlq_url=dlq_url, app_spec=app_spec, celery_app=celery_app)
    target = FleetTarget(redis_url=redis_url, prefix=prefix, dlq=dlq)
    ctx.obj = target
    ctx.call_on_close(dlq.close)
    if ctx.invoked_subcommand is None:
        _show(target, as_json)


@breakers.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {count, fleet}.")
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every fleet key with its state (the same as ``breakers`` alone)."""
    _show(_target(ctx), as_json)


def _show(target: FleetTarget, as_json: bool) -> None:
    from xsm_celery.redis.fleet_ops import list_fleet

    rows = _call(list_fleet, target.store(), target.breaker_config())
    if as_json:
        payload = {"count": len(rows), "fleet": [r.to_dict() for r in rows]}
        click.echo(json.dumps(payload, indent=2, sort_keys=True, default=str))
        return
    from rich import box
    from rich.table import Table

    table = Table(title="Fleet limits and breakers", box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("kind", "name", "state", "detail"):
        table.add_column(column)
    for row in rows:
        detail = ", ".join(f"{k}={v}" for k, v in row.detail.items())
        table.add_row(row.kind, row.name, row.state, detail)
    console = make_console()
    if not rows:
        console.print("No fleet breakers, limiters or slot pools in use.")
        return
    console.print(table)


@breakers.command("digest")
@click.argument("values", nargs=-1, required=True)
def digest(values: tuple[str, ...]) -> None:
    """Print the digest a keyed limit's name shows for each VALUE (``task[#digest]``).

    Limit names never hold a key's value; compute the digest of a value you hold to find
    its limit in this list, the logs, the metrics and the admin.
    """
    from xsm_celery.celery.fleet.limit_names import key_label

    for value in values:
        click.echo(key_label(value))


@breakers.command("reset")
@click.argument("name")
@click.option("--reason", help="Why resetting is safe now (required; audited).")
@click.option("--yes", is_flag=True, help="Confirm the reset.")
@click.option("--actor", help="Who acts (default: the OS user).")
@click.pass_context
def reset(ctx: click.Context, name: str, reason: str | None, yes: bool, actor: str | None) -> None:
    """Reset NAME (``payments`` or ``breaker:payments``) for the whole fleet, audited."""
    if reason is None or not reason.strip():
        raise CliError('reset needs --reason "why this is safe now" (it is audited)')
    if not yes:
        raise CliError("refusing to reset without --yes")
    target = _target(ctx)
    from xsm_celery.operators import current_actor
    from xsm_celery.redis.fleet_ops import audit_reset, find_key, reset_fleet

    audit_store = target.dlq.store()
    store = target.store()
    key = _call(find_key, store, name)
    outcome = _call(reset_fleet, store, key, target.breaker_config())
    who = current_actor(actor)
    _call(audit_reset, audit_store, key, actor=who, reason=reason.strip(), outcome=outcome)
    click.echo(f"reset {key.kind}:{key.name}: {outcome} (audited as {who})")
