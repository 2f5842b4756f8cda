"""The worker's tracer for chart tasks: a chart's retry without billiard's traceback copy.

Celery's tracer handles a ``Retry`` by building billiard's ``ExceptionInfo`` of it: a copy
of every frame of the traceback, with each code object's positions (2,341 for Celery's own
``trace_task``, whose frame heads every such traceback), and the formatted text. That is
most of what a retry costs a worker, and none of it says anything: the frames are Celery's
tracer and ``ChartTask.__call__``, and the chart, not a stack, decided the retry.

So a chart's retry is a :class:`ChartRetry`, and a chart task's tracer (Celery's own, built
with ``build_tracer(..., Info=ChartTraceInfo)``) records it with a :class:`RetryInfo`: the
same ``RETRY`` state in the result backend, ``on_retry`` hook, ``task_retry`` signal, log
line and ``task-retried`` event as any Celery retry, whose traceback text is the retry's
own line (``celery.exceptions.Retry: Retry in 0.5s: ConnectionError('refused')``). Every
other ``Retry`` (one a task raises itself) and every failure keep Celery's handling, full
traceback included; a task that gives up has its traceback in its dead letter.

Celery's worker assigns ``task.__trace__`` when it starts (the consumer, and each prefork
child); ``ChartTask`` passes the tracer it is given to :func:`rebuilt_tracer`, which builds it
again with the same task name, loader, hostname and app. A tracer of any other shape
(an eager one, or one another library built with its own ``Info``) is kept as it is.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from billiard.einfo import ExceptionWithTraceback  # type: ignore[attr-defined]
from celery import signals
from celery.app import trace as celery_trace
from celery.app.trace import LOG_RETRY, TraceInfo
from celery.exceptions import Retry

__all__ = [
    "ChartRetry",
    "ChartTraceInfo",
    "RetryInfo",
    "chart_retry",
    "rebuilt_tracer",
]

logger = logging.getLogger("celery.app.trace")

#: Celery's tracer: ``(task_id, args, kwargs, request) -> (R, I, T, Rstr)``.
Tracer = Callable[..., Any]


class ChartRetry(Retry):
    """A ``Retry`` the chart scheduled: Celery's retry, recorded without a traceback copy."""


def chart_retry(retry: Retry) -> ChartRetry:
    """The ``Retry`` that ``Task.retry(throw=False)`` returned, as a :class:`ChartRetry`.

    A copy of its state, not a new ``Retry(...)``: that would check the cause is picklable
    a second time.
    """
    marked = ChartRetry.__new__(ChartRetry)
    marked.__dict__.update(retry.__dict__)
    marked.args = (marked, *retry.args[1:])  # Celery's Retry is its own first argument
    return marked


class RetryInfo:
    """What Celery's ``ExceptionInfo`` tells of a retry, without its frames.

    Read by Celery where it reads an ``ExceptionInfo``: the result backend's traceback, the
    ``task-retried`` event (``exception.exc`` and ``traceback``), ``on_retry`` and the
    ``task_retry`` signal. Pickled as it is from a prefork child to the worker.
    """

    internal = False
    tb = None

    def __init__(self, retry: Retry) -> None:
        self.type = type(retry)
        self.traceback = "".join(traceback.format_exception_only(self.type, retry))
        self.exception = ExceptionWithTraceback(retry, self.traceback)

    @property
    def exc_info(self) -> tuple[type[BaseException], BaseException, None]:
        """``(type, exception, None)``: there is no traceback to log."""
        return self.type, self.exception, None

    def __str__(self) -> str:
        return self.traceback

    def __repr__(self) -> str:
        return f"<RetryInfo: {self.exception.exc!r}>"


class ChartTraceInfo(TraceInfo):
    """Celery's ``TraceInfo``, recording a :class:`ChartRetry` with a :class:`RetryInfo`."""

    __slots__ = ()

    def handle_retry(self, task: Any, req: Any, store_errors: bool = True, **kwargs: Any) -> Any:
        """Record the retry as Celery does; the chart's own without a traceback copy."""
        retry = self.retval
        if not isinstance(retry, ChartRetry):
            return super().handle_retry(task, req, store_errors=store_errors, **kwargs)
        einfo = RetryInfo(retry)
        if store_errors:
            task.backend.mark_as_retry(req.id, retry.exc, einfo.traceback, request=req)
        task.on_retry(retry.exc, req.id, req.args, req.kwargs, einfo)
        signals.task_retry.send(sender=task, request=req, reason=retry, einfo=einfo)
        if logger.isEnabledFor(logging.INFO):
            name = getattr(req, "shadow", None) or task.name
            logger.info(LOG_RETRY, {"id": req.id, "name": name, "exc": str(retry)})
        return einfo


def rebuilt_tracer(task: Any, tracer: Tracer) -> Tracer:
    """``tracer`` built again for ``task`` with :class:`ChartTraceInfo`, or as it is.

    The worker's tracer keeps what Celery built it with (task name, loader, hostname, app)
    in its closure; only a worker's tracer (not eager, Celery's own ``TraceInfo``) is
    rebuilt.
    """
    try:
        names, cells_of = tracer.__code__.co_freevars, tracer.__closure__ or ()
        cells = dict(zip(names, (c.cell_contents for c in cells_of), strict=True))
        if cells["Info"] is not TraceInfo or cells["eager"]:
            return tracer
        loader = cells["loader_task_init"].__self__
        name, hostname, app = cells["name"], cells["hostname"], cells["app"]
    except (AttributeError, KeyError, TypeError, ValueError):
        return tracer
    # Looked up when called, so a wrapper another library installed (an error tracker's)
    # wraps this tracer too.
    build = celery_trace.build_tracer
    rebuilt: Tracer = build(name, task, loader, hostname, app=app, Info=ChartTraceInfo)
    return rebuilt
