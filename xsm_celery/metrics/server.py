"""Serve ``/metrics`` from a Celery worker, in ``prometheus_client``'s multiprocess mode.

Celery's prefork pool runs tasks in child processes, and each child's counters live in its
own memory. ``prometheus_client`` solves that with a directory of memory-mapped files, one
per process, which the serving process adds up on every scrape. ``prepare_multiprocess``
chooses that directory (``PROMETHEUS_MULTIPROC_DIR`` when set, else a fresh private one)
before the pool forks and remembers it (``multiprocess_dir``) until ``release_multiprocess``;
``serve`` starts the HTTP server in the worker's main process with a registry that reads the
files plus the store figures. The same code serves the solo and threads pools, where there is
one process and the files cost nothing extra.

Workers on one host can share one endpoint instead: started with the same
``PROMETHEUS_MULTIPROC_DIR`` and no ``xsm_metrics_port``, each records into that directory
(``shared_multiprocess_dir``) and serves nothing, and one ``xsm-celery metrics`` process
serves the directory with the app's queue lengths and workers.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xsm_celery.errors import ConfigurationError, MissingExtraError
from xsm_celery.process import current_pid

try:
    import prometheus_client
    from prometheus_client import CollectorRegistry, multiprocess, values
except ImportError as exc:
    raise MissingExtraError(extra="metrics", module="prometheus_client") from exc

__all__ = [
    "ENV",
    "MetricsServer",
    "mark_process_dead",
    "multiprocess_dir",
    "prepare_multiprocess",
    "release_multiprocess",
    "serve",
    "shared_multiprocess_dir",
]

logger = logging.getLogger(__name__)

#: The environment variable ``prometheus_client`` reads its multiprocess directory from.
ENV = "PROMETHEUS_MULTIPROC_DIR"

_prepared: str | None = None


def prepare_multiprocess() -> tuple[str, bool]:
    """Switch this process (and the children it forks) to multiprocess metrics.

    Returns the directory and whether it was created here (and so is removed at shutdown).
    ``prometheus_client`` picks its value class when it is imported; a project that
    imported it before the worker started gets the multiprocess class set afterwards, which
    is what the library's own import would have chosen with the variable set.
    """
    global _prepared
    path = os.environ.get(ENV) or os.environ.get(ENV.lower())
    created = False
    if not path:
        path = tempfile.mkdtemp(prefix="xsm-metrics-")
        os.chmod(path, 0o700)
        os.environ[ENV] = path
        created = True
    elif not os.path.isdir(path):
        raise ConfigurationError(
            f"{ENV}={path!r} is not a directory; create it (empty, writable by the worker) "
            "or unset the variable so the worker makes a private one"
        )
    if not isinstance(values.ValueClass, type) or values.ValueClass.__name__ == "MutexValue":
        # ``current_pid`` instead of ``os.getpid``: the library asks on every increment.
        values.ValueClass = values.MultiProcessValue(current_pid)  # type: ignore[no-untyped-call]
    _prepared = path
    return path, created


def shared_multiprocess_dir() -> str | None:
    """The ``PROMETHEUS_MULTIPROC_DIR`` this process was started with, if it is a directory.

    A worker with no port of its own records into it for another process to serve; a
    variable naming no directory is ignored with a warning rather than stopping the worker.
    """
    path = os.environ.get(ENV) or os.environ.get(ENV.lower())
    if not path:
        return None
    if not os.path.isdir(path):
        logger.warning("%s=%r is not a directory; the worker records no metrics", ENV, path)
        return None
    return path


def multiprocess_dir() -> str | None:
    """The directory ``prepare_multiprocess`` chose in this process, until it is released."""
    return _prepared


def release_multiprocess(path: str, created: bool) -> None:
    """Forget ``path`` as this process's metric directory; remove it if it was ``created``."""
    global _prepared
    if _prepared == path:
        _prepared = None
    if created:
        shutil.rmtree(path, ignore_errors=True)
        if os.environ.get(ENV) == path:
            del os.environ[ENV]


def mark_process_dead(pid: int) -> None:
    """Forget the live gauges of a pool child that exited (its counters stay counted)."""
    try:
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
    except (OSError, KeyError):
        logger.debug("could not clear the metric files of process %s", pid, exc_info=True)


@dataclass
class MetricsServer:
    """The running ``/metrics`` endpoint of one worker."""

    addr: str
    port: int
    path: str | None
    created: bool
    registry: CollectorRegistry
    _server: Any = None
    _thread: Any = None

    def close(self) -> None:
        """Stop serving and remove the metric files this worker created."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.path is not None:
            release_multiprocess(self.path, self.created)


def serve(
    port: int,
    addr: str,
    path: str | None,
    *,
    created: bool = False,
    extra: Callable[[CollectorRegistry], None] | None = None,
) -> MetricsServer:
    """Serve the metric files of ``path`` (and ``extra``'s collectors) on ``addr:port``.

    Raises:
        ConfigurationError: the port is taken; two workers on one host need two ports,
            or one shared directory served by ``xsm-celery metrics``.
    """
    registry = CollectorRegistry()
    if path is not None:
        multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    if extra is not None:
        extra(registry)
    try:
        server, thread = prometheus_client.start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on {addr}:{port} ({exc}); give each worker on this host "
            "its own xsm_metrics_port (0 picks a free one), or let them share one endpoint: "
            "the same PROMETHEUS_MULTIPROC_DIR, no port, and one `xsm-celery metrics`"
        ) from exc
    bound = int(server.server_address[1])
    logger.info("xsm_celery metrics on http://%s:%d/metrics", addr, bound)
    return MetricsServer(addr, bound, path, created, registry, server, thread)
