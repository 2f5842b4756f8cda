"""Switch the exporters on in a Celery worker, from settings, through Celery's worker signals.

::

    app.conf.xsm_metrics_port = 9808     # each worker serves /metrics on 127.0.0.1:9808
    app.conf.xsm_metrics_addr = "0.0.0.0"
    app.conf.xsm_tracing = True          # OpenTelemetry spans (needs an SDK to record)
    app.conf.xsm_send_events = True      # Celery events (default: follows -E)
    app.conf.xsm_log_facts = True        # structured log records (default on)

With ``xsm_metrics_port`` unset, a worker started with ``PROMETHEUS_MULTIPROC_DIR`` naming a
directory still records its metrics there and serves nothing: several workers on one host
share the directory, and one ``xsm-celery metrics`` process serves it (see
``xsm_celery.metrics.server``). Either way every task of the app is counted
(``xsm_celery.metrics.app_tasks``), not only chart tasks.

The keys are declared in ``xsm_celery.celery.settings`` and read here. Importing
``xsm_celery.celery`` calls ``connect_worker_signals``, handing it the function that names an
app's stores, so this module imports nothing of the Celery integration: the dependency points
from ``celery`` to ``metrics`` only.

The Prometheus and OpenTelemetry exporters, which need their extras, are imported only when a
setting asks for them. ``worker_init`` runs in the worker's main process before the pool
forks, so the subscribers (the status board among them, and the multiprocess metric
directory) are inherited by every child; ``worker_ready`` starts the ``/metrics`` server once
the pool is up. Nothing here runs in a process that is not a worker: Beat or a web process
subscribes with ``xsm_celery.metrics.install_prometheus()`` and friends.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from celery import signals

from xsm_celery.errors import ConfigurationError, MissingExtraError, XsmError
from xsm_celery.hooks import FactKind, subscribe
from xsm_celery.metrics.events import CeleryEvents, events_wanted
from xsm_celery.metrics.figures import Sources
from xsm_celery.metrics.logs import FactLogger
from xsm_celery.metrics.states import StateBoard, board

__all__ = [
    "DEFAULT_METRICS_ADDR",
    "ObservabilityConfig",
    "connect_worker_signals",
    "observability_config",
    "started",
]

logger = logging.getLogger(__name__)

#: Where ``/metrics`` listens unless ``xsm_metrics_addr`` says otherwise.
DEFAULT_METRICS_ADDR = "127.0.0.1"

#: Identifies this module's receivers, so connecting twice connects once.
_DISPATCH_UID = "xsm_celery.metrics.worker"


@dataclass(frozen=True)
class ObservabilityConfig:
    """The exporter settings of one app, validated."""

    metrics_port: int | None = None
    metrics_addr: str = DEFAULT_METRICS_ADDR
    tracing: bool = False
    send_events: bool = False
    log_facts: bool = True


@dataclass
class _Running:
    """What one worker started, to stop it again at shutdown."""

    config: ObservabilityConfig
    metrics: Any = None
    server: Any = None
    path: str | None = None
    created: bool = False
    events: Any = None
    app_tasks: Any = None
    unsubscribe: list[Any] = field(default_factory=list)


_running: weakref.WeakKeyDictionary[Any, _Running] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def observability_config(app: Any) -> ObservabilityConfig:
    """Read and check the exporter settings of ``app``.

    Raises:
        ConfigurationError: a port that is not an integer in 0..65535, or a flag that is
            not a boolean.
    """
    conf = app.conf
    port = conf.get("xsm_metrics_port")
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535
    ):
        raise ConfigurationError(
            f"setting xsm_metrics_port={port!r} must be a port number (0-65535; 0 picks a "
            "free one), or None to serve no metrics"
        )
    addr = conf.get("xsm_metrics_addr") or DEFAULT_METRICS_ADDR
    if not isinstance(addr, str):
        raise ConfigurationError(f"setting xsm_metrics_addr={addr!r} must be an address string")
    events = conf.get("xsm_send_events")
    if events is None:
        events = bool(conf.get("worker_send_task_events"))
    return ObservabilityConfig(
        metrics_port=port,
        metrics_addr=addr,
        tracing=_flag(conf, "xsm_tracing", False),
        send_events=_flag(conf, "xsm_send_events", events),
        log_facts=_flag(conf, "xsm_log_facts", True),
    )


def _flag(conf: Any, key: str, default: bool) -> bool:
    value = conf.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigurationError(f"setting {key}={value!r} must be True or False")
    return value


def started(app: Any) -> Any:
    """What the exporters of ``app`` run in this worker (None before ``worker_init``)."""
    return _running.get(app)


def connect_worker_signals(sources: Callable[[Any], Sources] | None = None) -> None:
    """Switch the exporters on in every worker this process starts, from its app's settings.

    Connecting again changes nothing.

    Args:
        sources: ``app -> Sources``: the stores whose figures ``/metrics`` serves beside the
            counters (``xsm_celery.celery`` passes its ``sources_for_app``); None serves the
            counters only.
    """
    ready = partial(_on_worker_ready, sources=sources)
    signals.worker_init.connect(_on_worker_init, weak=False, dispatch_uid=_DISPATCH_UID)
    signals.worker_ready.connect(ready, weak=False, dispatch_uid=_DISPATCH_UID)
    signals.worker_process_shutdown.connect(
        _on_process_shutdown, weak=False, dispatch_uid=_DISPATCH_UID
    )
    signals.worker_shutdown.connect(_on_worker_shutdown, weak=False, dispatch_uid=_DISPATCH_UID)


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    if app is None:
        return
    with _lock:
        if app in _running:
            return
        config = observability_config(app)
        running = _running[app] = _Running(config)
    try:
        _install(app, sender, running)
    except XsmError:
        raise
    except Exception:
        logger.exception("xsm_celery: could not start the exporters; the worker runs without")


def _install(app: Any, worker: Any, running: _Running) -> None:
    config = running.config
    running.unsubscribe.append(_subscribe(board.handle, StateBoard.KINDS))
    prepared = _metrics_dir(config)
    if prepared is not None:
        running.path, running.created = prepared
        from prometheus_client import CollectorRegistry

        from xsm_celery.metrics.app_tasks import AppTaskMetrics
        from xsm_celery.metrics.prometheus import PrometheusMetrics

        registry = CollectorRegistry()
        running.metrics = PrometheusMetrics(registry)
        running.unsubscribe.append(_subscribe(running.metrics.handle))
        running.app_tasks = AppTaskMetrics(registry, str(getattr(worker, "hostname", "") or ""))
        running.app_tasks.connect()
    if config.tracing:
        from xsm_celery.metrics.tracing import Tracing

        running.unsubscribe.append(_subscribe(Tracing().handle))
        _connect_trace_propagation()
    if events_wanted(app, worker):  # -E, unless xsm_send_events says otherwise
        running.events = CeleryEvents(app, getattr(worker, "hostname", None))
        running.unsubscribe.append(_subscribe(running.events.handle))
    if config.log_facts:
        running.unsubscribe.append(_subscribe(FactLogger().handle, FactLogger.KINDS))


def _metrics_dir(config: ObservabilityConfig) -> tuple[str, bool] | None:
    """The multiprocess directory this worker records into, and whether it made it.

    A port of its own: the configured directory or a private one. No port: the shared
    ``PROMETHEUS_MULTIPROC_DIR`` when one is set (and ``prometheus_client`` installed),
    else None, and the worker records nothing.
    """
    if config.metrics_port is None:
        try:
            from xsm_celery.metrics.server import shared_multiprocess_dir
        except MissingExtraError:
            return None
        if shared_multiprocess_dir() is None:
            return None
    from xsm_celery.metrics.server import prepare_multiprocess

    return prepare_multiprocess()


def _subscribe(handler: Any, kinds: Iterable[FactKind] | None = None) -> Any:
    """Subscribe ``handler``; with ``kinds``, to those only, so the others are never built.

    The default subscribers (the status board, the fact logger) read a few kinds each: a
    worker with nothing else subscribed builds no per-attempt facts at all.
    """
    return subscribe(handler, kinds)


def _on_worker_ready(
    sender: Any = None, *, sources: Callable[[Any], Sources] | None = None, **_: Any
) -> None:
    app = getattr(sender, "app", None)
    running = _running.get(app) if app is not None else None
    if running is None or running.config.metrics_port is None or running.path is None:
        return
    from xsm_celery.metrics.server import serve

    path = running.path
    try:
        running.server = serve(
            running.config.metrics_port,
            running.config.metrics_addr,
            path,
            created=running.created,
            extra=None if sources is None else partial(_register_figures, app, sources),
        )
    except XsmError as exc:
        logger.error("xsm_celery: %s", exc)


def _register_figures(app: Any, sources: Callable[[Any], Sources], registry: Any) -> None:
    from xsm_celery.metrics.collector import StoreFiguresCollector
    from xsm_celery.metrics.queues import QueueLengthCollector

    registry.register(StoreFiguresCollector(lambda: sources(app)))
    registry.register(QueueLengthCollector(app))


def _on_process_shutdown(pid: int | None = None, **_: Any) -> None:
    if pid is None or not any(r.path for r in list(_running.values())):
        return
    from xsm_celery.metrics.server import mark_process_dead

    mark_process_dead(pid)


def _on_worker_shutdown(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    with _lock:
        running = _running.pop(app, None) if app is not None else None
    if running is None:
        return
    for stop in running.unsubscribe:
        stop()
    if running.app_tasks is not None:
        running.app_tasks.disconnect()
    if running.events is not None:
        running.events.close()
    if running.server is not None:
        running.server.close()
    elif running.path is not None:
        from xsm_celery.metrics.server import release_multiprocess

        release_multiprocess(running.path, running.created)


_propagation_connected = False


def _connect_trace_propagation() -> None:
    """Carry the current trace on every task message, and continue it in the task.

    Chart tasks continue the trace through their attempt span; these two handlers do the
    same for any other task (a workflow's event task, a Beat task), so a step it runs is
    parented on the message's trace. A message that already carries ``traceparent`` (a
    chart task's retry, a durable timer) keeps it.
    """
    global _propagation_connected
    if _propagation_connected:
        return
    _propagation_connected = True
    signals.before_task_publish.connect(_inject_headers, weak=False)
    signals.task_prerun.connect(_continue_trace, weak=False)
    signals.task_postrun.connect(_end_trace, weak=False)


def _inject_headers(headers: Any = None, **_: Any) -> None:
    if isinstance(headers, dict) and "traceparent" not in headers:
        from xsm_celery.metrics.tracing import inject

        inject(headers)


_tokens: dict[str, Any] = {}


def _continue_trace(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    headers = getattr(getattr(task, "request", None), "headers", None) or {}
    parent = headers.get("traceparent") if isinstance(headers, dict) else None
    if not task_id or not isinstance(parent, str):
        return
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    extracted = TraceContextTextMapPropagator().extract({"traceparent": parent})
    _tokens[task_id] = context.attach(extracted)


def _end_trace(task_id: str | None = None, **_: Any) -> None:
    token = _tokens.pop(task_id, None) if task_id else None
    if token is not None:
        from opentelemetry import context

        context.detach(token)
