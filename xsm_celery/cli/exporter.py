"""``xsm-celery metrics``: one Prometheus endpoint for the whole Celery app on this host.

A worker with ``xsm_metrics_port`` serves its own port; two workers on one host then need
two. Started instead with one shared ``PROMETHEUS_MULTIPROC_DIR`` and no port, every worker
(and every pool child) records into that directory, and this process serves it: the task
counters of all of them added up, plus what no single worker can know alone, read on each
scrape: the length of every queue the app routes to, which workers answer a ping, and the
store figures (dead letters, outbox, timers). It is also the exporter to run beside workers
that serve their own port, for the queues and workers.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import click

from xsm_celery.cli.base import CliError, OneLineCommand
from xsm_celery.cli.target import command_app
from xsm_celery.errors import XsmError

__all__ = ["DEFAULT_PORT", "add_collectors", "build_registry", "metrics"]

#: The port ``xsm-celery metrics`` listens on unless ``--port`` says otherwise.
DEFAULT_PORT = 9808


def add_collectors(
    registry: Any,
    app: Any,
    *,
    queues: tuple[str, ...] = (),
    workers: bool = True,
    stores: bool = True,
    ping_timeout: float = 1.0,
) -> None:
    """Register the collectors that read the app's broker, workers and stores on scrape."""
    from xsm_celery.metrics.queues import QueueLengthCollector
    from xsm_celery.metrics.workers import WorkerCollector

    registry.register(QueueLengthCollector(app, queues))
    if workers:
        registry.register(WorkerCollector(app, timeout=ping_timeout))
    if stores:
        from xsm_celery.celery.worker.status import sources_for_app
        from xsm_celery.metrics.collector import StoreFiguresCollector

        registry.register(StoreFiguresCollector(lambda: sources_for_app(app, create=False)))


def build_registry(app: Any, *, directory: str | None, **options: Any) -> Any:
    """The registry one scrape reads: the directory's files and the app's live figures."""
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    if directory is not None:
        multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    add_collectors(registry, app, **options)
    return registry


@click.command(cls=OneLineCommand)
@click.option("--app", "app_spec", metavar="MODULE:APP", help="The Celery app to export.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, help="Port to serve on.")
@click.option("--addr", default="127.0.0.1", show_default=True, help="Address to serve on.")
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="NAME",
    help="A queue to measure besides those the app routes to (repeatable).",
)
@click.option(
    "--workers/--no-workers",
    default=True,
    show_default=True,
    help="Ping the workers on each scrape (celery_worker_up).",
)
@click.option(
    "--stores/--no-stores",
    default=True,
    show_default=True,
    help="Read the app's stores on each scrape (dead letters, outbox, timers).",
)
@click.option(
    "--ping-timeout", default=1.0, show_default=True, help="Seconds to wait for ping replies."
)
@click.option("--once", is_flag=True, help="Print one scrape to stdout and exit.")
@click.pass_context
def metrics(  # noqa: PLR0917 - one parameter per click option
    ctx: click.Context,
    app_spec: str | None,
    port: int,
    addr: str,
    queues: tuple[str, ...],
    workers: bool,
    stores: bool,
    ping_timeout: float,
    once: bool,
) -> None:
    """Serve /metrics for the whole app: every worker's task counts (from the shared
    PROMETHEUS_MULTIPROC_DIR), queue lengths, workers up and store figures.

    Start the workers with the same PROMETHEUS_MULTIPROC_DIR and no xsm_metrics_port.
    """
    try:
        from xsm_celery.metrics.server import serve, shared_multiprocess_dir
    except XsmError as exc:
        raise CliError(str(exc)) from None
    app = command_app(ctx, app_spec)
    if app is None:
        raise CliError("needs a Celery app: pass --app module:app (or: celery -A proj xsm metrics)")
    directory = shared_multiprocess_dir()
    if directory is None:
        click.echo(
            "xsm metrics: PROMETHEUS_MULTIPROC_DIR is not set: serving queues, workers and "
            "stores only, no task counts",
            err=True,
        )
    options: dict[str, Any] = {
        "queues": queues,
        "workers": workers,
        "stores": stores,
        "ping_timeout": ping_timeout,
    }
    if once:
        from prometheus_client import generate_latest

        registry = build_registry(app, directory=directory, **options)
        click.echo(generate_latest(registry).decode(), nl=False)
        return
    try:
        server = serve(
            port,
            addr,
            directory,
            extra=lambda registry: add_collectors(registry, app, **options),
        )
    except XsmError as exc:
        raise CliError(str(exc)) from None
    click.echo(f"xsm metrics: serving http://{server.addr}:{server.port}/metrics", err=True)
    _wait_for_stop()
    server.close()


def _wait_for_stop() -> None:
    """Block until SIGTERM or Ctrl-C."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
