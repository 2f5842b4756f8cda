"""A task registered only when autodiscovery imports this module."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="autodisc.ping")
def ping() -> str:
    """Never run: only looked up by a replay."""
    return "pong"
