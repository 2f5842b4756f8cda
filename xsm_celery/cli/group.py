"""The ``xsm-celery`` command group."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click

from xsm_celery.cli import chart_tools
from xsm_celery.cli.asyncapi import asyncapi
from xsm_celery.cli.base import OneLineGroup
from xsm_celery.cli.breakers import breakers
from xsm_celery.cli.dlq import dlq
from xsm_celery.cli.exporter import metrics
from xsm_celery.cli.status import status

__all__ = ["cli", "main"]


def _version() -> str:
    try:
        return version("xsm-celery")
    except PackageNotFoundError:
        return "unknown"


@click.group(cls=OneLineGroup)
@click.version_option(_version(), prog_name="xsm-celery")
def cli() -> None:
    """Operate xsm_celery: dead letters, the fleet's breakers and limits, AsyncAPI documents
    of charts, and the status of everything it runs."""


cli.add_command(dlq)
cli.add_command(asyncapi)
cli.add_command(breakers)
cli.add_command(status)
cli.add_command(metrics)
cli.add_command(chart_tools.inspect)
cli.add_command(chart_tools.diagram)
cli.add_command(chart_tools.simulate)
cli.add_command(chart_tools.validate)
cli.add_command(chart_tools.docs)
cli.add_command(chart_tools.paths)


def main() -> None:
    """Run ``xsm-celery`` (the console script)."""
    cli(prog_name="xsm-celery")
