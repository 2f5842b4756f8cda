"""The ``xsm-celery`` command group."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click

from xsm_celery.cli.asyncapi import asyncapi
from xsm_celery.cli.base import OneLineGroup
from xsm_celery.cli.dlq import dlq

__all__ = ["cli", "main"]


def _version() -> str:
    try:
        return version("xsm-celery")
    except PackageNotFoundError:
        return "unknown"


@click.group(cls=OneLineGroup)
@click.version_option(_version(), prog_name="xsm-celery")
def cli() -> None:
    """Operate xsm_celery: dead letters of chart-driven Celery tasks and event machines, and
    the AsyncAPI documents of charts."""


cli.add_command(dlq)
cli.add_command(asyncapi)


def main() -> None:
    """Run ``xsm-celery`` (the console script)."""
    cli(prog_name="xsm-celery")
