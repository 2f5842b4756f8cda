"""``manage.py xsm_timers``: publish the chart-task retries whose durable timers are due.

The same work as the Beat entry ``xsm.beat_schedule(timers_every=...)``, for deployments
that run it from cron or a sidecar. Timers are leased, so it is safe beside Beat.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from xsm_celery.django.management.looping import repeat
from xsm_celery.errors import XsmError


class Command(BaseCommand):
    """Fire due durable timers once, a number of times, or until interrupted."""

    help = "Publish chart-task retries whose durable timers are due."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--owner", help="Lease owner (default: host:pid).")
        parser.add_argument("--runs", type=int, default=1, help="Runs to make; 0 = forever.")
        parser.add_argument("--interval", type=float, default=10.0, help="Seconds between runs.")

    def handle(self, *args: Any, **options: Any) -> None:
        from xsm_celery.celery import fire_due_timers
        from xsm_celery.django.admin.celery_app import celery_app

        try:
            app = celery_app()
        except XsmError as exc:
            raise CommandError(str(exc), returncode=2) from exc

        def once() -> None:
            fired = fire_due_timers(app, owner=options.get("owner"))
            self.stdout.write(f"fired {fired} due timer(s)")

        repeat(once, runs=max(options["runs"], 0), interval_s=options["interval"])
