"""``celery -A proj xsm ...``: the xsm commands as a Celery sub-command.

Celery finds this group through the ``celery.commands`` entry point. Inside it, the app that
``celery -A`` loaded names the dead-letter store (its ``xsm_dead_letter_store`` setting) and
is the app a task replay re-enqueues through, so ``--dlq`` and ``--app`` become optional.
"""

from __future__ import annotations

import click

from xsm_celery.cli.asyncapi import asyncapi
from xsm_celery.cli.base import OneLineGroup
from xsm_celery.cli.dlq import dlq

__all__ = ["xsm"]


@click.group(cls=OneLineGroup)
def xsm() -> None:
    """xsm_celery operations: dead letters (xsm dlq list|show|replay|resolve|purge), and
    AsyncAPI documents (xsm asyncapi CHART)."""


xsm.add_command(dlq)
xsm.add_command(asyncapi)
