"""The demo's Celery project: a chart task that calls a flaky upstream, and an order workflow.

This is what a user's project looks like: a Celery app, ``xsm_dead_letter_store`` pointing
at a SQLite file, and a task with ``base=ChartTask``, a ``RetryPolicy`` and ``give_up_on``.
The worker is started with ``celery -A xsm_celery.demo.app worker``; everything it writes
lives in the folder named by ``XSM_DEMO_DIR`` (``./demo-data`` by default).

The signal handlers at the bottom only feed the demo's live view; a project needs none.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from celery import Celery, signals

from xsm_celery.celery import HEADER, ChartTask
from xsm_celery.demo.broker import TRANSPORT
from xsm_celery.demo.orders import make_orders
from xsm_celery.demo.progress import ProgressLog
from xsm_celery.demo.upstream import FlakyUpstream, MalformedQuote
from xsm_celery.patterns import RetryPolicy

__all__ = [
    "POLICY",
    "QUEUE",
    "TASK_NAME",
    "app",
    "data_dir",
    "fetch_quote",
    "make_app",
    "orders",
]

#: The demo's task, by name.
TASK_NAME = "xsm_demo.fetch_quote"

#: The demo's queue: with XSM_BROKER_URL pointing at a shared Redis or RabbitMQ, the demo
#: neither takes other applications' tasks nor leaves its own on their queue.
QUEUE = "xsm-demo"

#: Four attempts, 300 ms doubling to at most 2 s, with "equal" jitter (half fixed, half
#: random), so the live view shows real, varying delays and the demo stays short.
POLICY = RetryPolicy(max_attempts=4, base_ms=300, factor=2.0, max_ms=2_000, jitter="equal")


def data_dir() -> Path:
    """The folder the demo keeps its SQLite files in (``XSM_DEMO_DIR``)."""
    return Path(os.environ.get("XSM_DEMO_DIR", "demo-data")).resolve()


def make_app(data: Path, broker_url: str | None = None) -> Celery:
    """The demo app: the embedded SQLite broker unless ``broker_url`` names another."""
    app = Celery("xsm_demo", broker=broker_url or f"sqlite:///{data / 'broker.db'}")
    if not broker_url:
        app.conf.update(broker_transport=TRANSPORT)
    app.conf.update(
        xsm_dead_letter_store=f"sqlite:///{data / 'dead_letters.db'}",
        xsm_timer_store=f"sqlite:///{data / 'timers.db'}",
        xsm_workflow_store=f"sqlite:///{data / 'workflows.db'}",
        task_default_queue=QUEUE,
        task_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        # A pool process that dies is reported after this many seconds (Celery waits 10 s
        # by default for a result it might still have sent); the demo kills one on purpose.
        worker_lost_wait=0.5,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
    )
    return app


app = make_app(data_dir(), os.environ.get("XSM_BROKER_URL") or None)
orders = make_orders(app)

_per_process: dict[str, Any] = {}


def _shared(kind: str) -> Any:
    """The upstream or the progress log, opened once per process (after any fork)."""
    key = f"{kind}:{os.getpid()}"
    found = _per_process.get(key)
    if found is None:
        path = data_dir() / f"{kind}.db"
        found = _per_process[key] = (FlakyUpstream if kind == "upstream" else ProgressLog)(path)
    return found


@app.task(base=ChartTask, name=TASK_NAME, retry_policy=POLICY, give_up_on=(MalformedQuote,))
def fetch_quote(order_id: str) -> float:
    """Ask the upstream for a quote: timeouts are retried, a malformed answer is not."""
    upstream: FlakyUpstream = _shared("upstream")
    return upstream.quote(order_id)


def _mine(sender: Any) -> bool:
    return getattr(sender, "name", None) == TASK_NAME


def _attempt(request: Any) -> int:
    """The attempt this run is: one more than the chart's counter in the message header."""
    snapshot = (getattr(request, "headers", None) or {}).get(HEADER)
    if not snapshot:
        return 1
    try:
        return int(json.loads(snapshot)["context"]["attempt"]) + 1
    except (ValueError, KeyError, TypeError):
        return 1


@signals.worker_ready.connect
def _worker_ready(**_: Any) -> None:
    _shared("progress").add("-", "-", "ready")


@signals.task_prerun.connect
def _started(sender: Any = None, task_id: str = "", args: Any = (), **_: Any) -> None:
    if not _mine(sender):
        return
    request = sender.request
    redelivered = bool((request.delivery_info or {}).get("redelivered"))
    _shared("progress").add(
        task_id,
        str(args[0]),
        "redelivered" if redelivered else "started",
        attempt=_attempt(request),
    )


@signals.task_retry.connect
def _retrying(sender: Any = None, request: Any = None, reason: Any = None, **_: Any) -> None:
    if not _mine(sender) or request is None:
        return
    when = getattr(reason, "when", None)
    if isinstance(when, datetime):
        delay_ms = max(0.0, (when - datetime.now(timezone.utc)).total_seconds() * 1000)
    else:
        delay_ms = float(when or 0) * 1000
    error = getattr(reason, "exc", None)
    _shared("progress").add(
        request.id,
        str(request.args[0]),
        "retrying",
        attempt=_attempt(request),
        delay_ms=delay_ms,
        detail=_describe(error),
    )


@signals.task_success.connect
def _succeeded(sender: Any = None, result: Any = None, **_: Any) -> None:
    if _mine(sender):
        request = sender.request
        _shared("progress").add(
            request.id,
            str(request.args[0]),
            "succeeded",
            attempt=_attempt(request),
            detail=f"quote {result}",
        )


@signals.task_failure.connect
def _failed(
    sender: Any = None, task_id: str = "", exception: Any = None, args: Any = (), **_: Any
) -> None:
    if _mine(sender):
        _shared("progress").add(
            task_id,
            str(args[0]),
            "failed",
            attempt=_attempt(sender.request),
            detail=_describe(exception),
        )


def _describe(error: Any) -> str:
    return "" if error is None else f"{type(error).__name__}: {error}"
