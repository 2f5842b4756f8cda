"""``celery -A proj xsm ...``: the xsm commands as a Celery sub-command.

Celery finds this group through the ``celery.commands`` entry point. Inside it, the app that
``celery -A`` loaded names the dead-letter store (its ``xsm_dead_letter_store`` setting) and
is the app a task replay re-enqueues through, so ``--dlq`` and ``--app`` become optional.
"""

from __future__ import annotations

import click

from xsm_celery.cli import chart_tools
from xsm_celery.cli.asyncapi import asyncapi
from xsm_celery.cli.base import OneLineGroup
from xsm_celery.cli.breakers import breakers
from xsm_celery.cli.dlq import dlq
from xsm_celery.cli.exporter import metrics
from xsm_celery.cli.status import status

__all__ = ["xsm"]


@click.group(cls=OneLineGroup)
def xsm() -> None:
    """xsm_celery operations: dead letters (xsm dlq ...), fleet limits (xsm breakers ...),
    AsyncAPI documents (xsm asyncapi CHART) and the status view (xsm status)."""


xsm.add_command(dlq)
xsm.add_command(asyncapi)
xsm.add_command(breakers)
xsm.add_command(status)
xsm.add_command(metrics)
xsm.add_command(chart_tools.inspect)
xsm.add_command(chart_tools.diagram)
xsm.add_command(chart_tools.simulate)
xsm.add_command(chart_tools.validate)
xsm.add_command(chart_tools.docs)
xsm.add_command(chart_tools.paths)
