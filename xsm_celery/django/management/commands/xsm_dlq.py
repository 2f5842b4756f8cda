"""``manage.py xsm_dlq list|show|replay|resolve|purge``: the CLI's ``dlq`` on Django's store.

Exit codes as the CLI's: 0 success, 1 a real replay ran and was not sent, 2 refused input
(unknown id, missing ``--yes`` or ``--reason``, bad ``--older-than``, a refused replay).
``replay`` is a dry run unless ``--no-dry-run --yes --reason`` are all given; every real
action writes an audit row.
"""

from __future__ import annotations

import json
import time
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from xsm_celery import operators
from xsm_celery.django.operations import DeadLetterOperations
from xsm_celery.django.stores import DjangoDeadLetterStore
from xsm_celery.errors import XsmError
from xsm_celery.operators import PURGE_ALL, current_actor
from xsm_celery.patterns.dead_letter import DeadLetter, purge_resolved_older_than


def parse_age(text: str) -> float:
    """``90s``, ``15m``, ``12h``, ``30d`` or ``2w`` as seconds (see ``operators.parse_age``)."""
    try:
        return operators.parse_age(text)
    except ValueError as exc:
        raise CommandError(str(exc), returncode=2) from None


class Command(BaseCommand):
    """List, show, replay, resolve and purge the dead letters in the Django database."""

    help = "List, show, replay, resolve and purge dead letters (the CLI's dlq on Django)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--database", help="Database alias (default: XSM_CELERY DATABASE).")
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="Dead letters, newest first.")
        listing.add_argument("--all", action="store_true", help="Include resolved records.")
        listing.add_argument("--limit", type=int, default=100)
        listing.add_argument("--json", action="store_true")
        show = sub.add_parser("show", help="One dead letter with its error chain and audit.")
        show.add_argument("record_id")
        show.add_argument("--json", action="store_true")
        replay = sub.add_parser("replay", help="Send a dead letter again (a dry run by default).")
        replay.add_argument("record_id")
        replay.add_argument("--no-dry-run", dest="dry_run", action="store_false")
        replay.add_argument(
            "--force",
            action="store_true",
            help="Replay even though the chart changed since capture.",
        )
        resolve = sub.add_parser("resolve", help="Mark a dead letter resolved without replay.")
        resolve.add_argument("record_id")
        purge = sub.add_parser("purge", help="Delete dead letters (audited).")
        purge.add_argument("--older-than", help="Age such as 90s, 15m, 12h, 30d, 2w.")
        purge.add_argument("--id", dest="record_id", help="Delete this one record.")
        purge.add_argument(
            "--include-unresolved",
            action="store_true",
            help="With --older-than, delete unresolved records too.",
        )
        for acting in (replay, resolve, purge):
            acting.add_argument("--yes", action="store_true", help="Confirm.")
            acting.add_argument("--reason", help="Why (kept in the audit row).")
            acting.add_argument("--actor", help="Who acts (default: the login name).")
            acting.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        store = DjangoDeadLetterStore(using=options.get("database"))
        self.ops = DeadLetterOperations(store)
        try:
            getattr(self, f"_{options['action']}")(store, options)
        except (XsmError, ValueError) as exc:
            raise CommandError(str(exc), returncode=2) from exc

    def _emit(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str))

    def _record(self, store: DjangoDeadLetterStore, record_id: str) -> DeadLetter:
        record = store.get(record_id)
        if record is None:
            raise CommandError(f"no dead letter with id {record_id!r}", returncode=2)
        return record

    def _list(self, store: DjangoDeadLetterStore, options: dict[str, Any]) -> None:
        if options["limit"] < 1:
            raise CommandError(f"--limit must be >= 1, got {options['limit']}", returncode=2)
        records = store.list(limit=options["limit"], include_resolved=options["all"])
        if options["json"]:
            self._emit({"count": len(records), "dead_letters": [r.to_dict() for r in records]})
            return
        if not records:
            self.stdout.write("no dead letters")
        for record in records:
            last = record.errors[-1] if record.errors else {}
            self.stdout.write(
                f"{record.id}  {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(record.taken_at))}"
                f"  {record.reason:<17} {record.task_name or record.machine_id}"
                f"  attempts={record.attempts}  {last.get('type', '')}: {last.get('message', '')}"
            )

    def _show(self, store: DjangoDeadLetterStore, options: dict[str, Any]) -> None:
        record = self._record(store, options["record_id"])
        audit = store.audit_log(record.id)
        if options["json"]:
            self._emit({**record.to_dict(), "audit": audit})
            return
        for name, value in record.to_dict().items():
            if name not in ("errors", "snapshot", "event", "envelope", "task_args", "task_kwargs"):
                self.stdout.write(f"{name:>16}: {value}")
        self.stdout.write("error chain (oldest first):")
        for n, error in enumerate(record.errors, 1):
            self.stdout.write(f"  {n}. {error.get('type')}: {error.get('message')}")
        self.stdout.write(f"arguments: {json.dumps([record.task_args, record.task_kwargs])}")
        self.stdout.write("snapshot:\n" + json.dumps(record.snapshot, indent=2, sort_keys=True))
        self.stdout.write("audit:")
        for entry in audit:
            self.stdout.write(
                f"  {entry['action']} by {entry['actor']}: {entry['reason']} -> {entry['outcome']}"
            )

    def _guard(self, options: dict[str, Any], action: str) -> tuple[str, str]:
        if not options["yes"]:
            raise CommandError(f"refusing to {action} without --yes", returncode=2)
        reason = (options.get("reason") or "").strip()
        if not reason:
            raise CommandError(
                f'{action} needs --reason "why this is safe now" (it is audited)', returncode=2
            )
        return reason, current_actor(options.get("actor"))

    def _replay(self, store: DjangoDeadLetterStore, options: dict[str, Any]) -> None:
        record = self._record(store, options["record_id"])
        if options["dry_run"]:
            plan = self.ops.plan(record)
            result = {
                "record_id": record.id,
                "dry_run": True,
                "kind": plan.kind,
                "preview": plan.preview,
                "refusal": plan.refusal,
                "chart_changed": plan.chart_changed,
                "warnings": plan.warnings,
            }
            if options["json"]:
                self._emit(result)
            else:
                self.stdout.write(
                    f"dry run: {record.id}: {plan.refusal or plan.preview} "
                    "(nothing changed; replay for real with --no-dry-run --yes "
                    "--reason ...)"
                )
            if plan.refusal:
                raise CommandError(plan.refusal, returncode=2)
            return
        reason, actor = self._guard(options, "replay")
        outcome = self.ops.replay(record.id, actor=actor, reason=reason, force=options["force"])
        if options["json"]:
            self._emit(
                {
                    "record_id": outcome.record_id,
                    "status": outcome.status,
                    "detail": outcome.detail,
                    "task_id": outcome.task_id,
                }
            )
        else:
            self.stdout.write(f"{outcome.record_id}: {outcome.status}: {outcome.detail}")
        if outcome.status == "refused":
            raise CommandError(outcome.detail, returncode=2)
        if not outcome.ok:
            raise CommandError(outcome.detail, returncode=1)

    def _resolve(self, store: DjangoDeadLetterStore, options: dict[str, Any]) -> None:
        reason, actor = self._guard(options, "resolve")
        self._record(store, options["record_id"])
        if not self.ops.resolve(options["record_id"], actor=actor, reason=reason):
            raise CommandError(f"{options['record_id']} is already resolved", returncode=2)
        self.stdout.write(f"{options['record_id']}: resolved")

    def _purge(self, store: DjangoDeadLetterStore, options: dict[str, Any]) -> None:
        older, record_id = options.get("older_than"), options.get("record_id")
        if (older is None) == (record_id is None):
            raise CommandError(
                "purge needs exactly one of --older-than AGE or --id ID", returncode=2
            )
        age = parse_age(older) if older is not None else None
        reason, actor = self._guard(options, "purge")
        if age is not None:
            cutoff = time.time() - age
            if options.get("include_unresolved"):
                deleted, which = store.purge_older_than(cutoff), ""
            else:
                deleted, which = purge_resolved_older_than(store, cutoff), " resolved"
            store.audit(
                PURGE_ALL,
                "purge",
                actor=actor,
                reason=reason,
                outcome=f"deleted {deleted}{which} record(s) older than {older}",
            )
        else:
            assert record_id is not None
            if not self.ops.purge(record_id, actor=actor, reason=reason):
                raise CommandError(f"no dead letter with id {record_id!r}", returncode=2)
            deleted = 1
        if options["json"]:
            self._emit({"deleted": deleted})
        else:
            self.stdout.write(f"purged {deleted} dead letter(s)")
