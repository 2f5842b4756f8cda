"""``manage.py xsm_relay``: publish the Django outbox's pending rows through the broker.

Rows are leased (``claimed_by`` / ``claimed_until``), so several relays may run at once,
one per replica or beside the Beat task. The broker is ``--broker URL``, else the factory
named by ``XSM_CELERY["BROKER"]``, else the Celery app's own broker through the kombu
adapter, so events travel beside the tasks.
"""

from __future__ import annotations

import os
import socket
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from xsm_celery.django.conf import get_settings, import_string
from xsm_celery.django.management.looping import repeat
from xsm_celery.django.stores import DjangoOutboxStore
from xsm_celery.errors import XsmError


class Command(BaseCommand):
    """Relay the outbox once, a number of times, or until interrupted."""

    help = "Publish pending outbox rows (leased, so several relays may run at once)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--database", help="Database alias (default: XSM_CELERY DATABASE).")
        parser.add_argument(
            "--broker",
            help="Broker URL (default: XSM_CELERY BROKER, else the Celery app's broker).",
        )
        parser.add_argument("--batch", type=int, help="Rows leased per batch.")
        parser.add_argument("--lease", type=float, help="Seconds a lease lasts.")
        parser.add_argument("--owner", help="Lease owner; give a stable name such as the pod.")
        parser.add_argument(
            "--max-attempts",
            type=int,
            help="Broker refusals of one row before it is set aside as failed "
            "(default: XSM_CELERY RELAY_MAX_ATTEMPTS, 5).",
        )
        parser.add_argument("--max-batches", type=int, default=100, help="Batches per run at most.")
        parser.add_argument("--runs", type=int, default=1, help="Runs to make; 0 = forever.")
        parser.add_argument("--interval", type=float, default=5.0, help="Seconds between runs.")

    def handle(self, *args: Any, **options: Any) -> None:
        from xsm_celery.eda.relay import OutboxRelay

        conf = get_settings()
        outbox = DjangoOutboxStore(using=options.get("database"))
        owner = options.get("owner") or f"{socket.gethostname()}:{os.getpid()}"
        try:
            relay = OutboxRelay(
                outbox,
                self._broker(options.get("broker")),
                batch=options.get("batch") or conf.relay_batch,
                owner=owner,
                lease_s=options.get("lease") or conf.relay_lease_s,
                max_attempts=options.get("max_attempts") or conf.relay_max_attempts,
            )
        except (ValueError, XsmError) as exc:
            raise CommandError(str(exc), returncode=2) from exc

        def once() -> None:
            try:
                sent = relay.relay_all_sync(max_batches=options["max_batches"])
                pending = outbox.count(pending_only=True)
                failed = outbox.count(failed_only=True)
            except XsmError as exc:
                raise CommandError(str(exc), returncode=2) from exc
            note = f", {failed} failed (see the admin's outbox, status Failed)" if failed else ""
            self.stdout.write(f"relayed {sent} row(s); {pending} pending{note}")

        repeat(once, runs=max(options["runs"], 0), interval_s=options["interval"])

    def _broker(self, url: str | None) -> Any:
        factory = get_settings().broker
        if url is None and factory:
            return import_string(factory)()
        # The relay publishes with kombu: the Django app reaches into the kombu integration
        # here only, when a relay actually runs.
        from xsm_celery.kombu import KombuBrokerAdapter

        if url is not None:
            return KombuBrokerAdapter(url)
        from xsm_celery.django.admin.celery_app import celery_app

        return KombuBrokerAdapter(celery_app().connection_for_write())
