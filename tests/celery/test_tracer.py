"""The worker's tracer of a chart task records the chart's retry as Celery does, frames aside."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from billiard.einfo import ExceptionInfo
from celery import Celery
from celery.app.trace import TraceInfo, build_tracer
from celery.exceptions import Retry
from celery.signals import task_retry

from tests.celery.queues import drain_queue
from xsm_celery.celery import ChartTask
from xsm_celery.celery.task.tracer import ChartRetry, ChartTraceInfo, RetryInfo, chart_retry
from xsm_celery.patterns import RetryPolicy

HOSTNAME = "celery@tracer-test"


@pytest.fixture
def app() -> Celery:
    """An app on Celery's in-memory broker and result backend, storing results."""
    app = Celery(f"tracer-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.conf.update(
        broker_url="memory://",
        result_backend="cache+memory://",
        task_default_queue=f"xsm-tracer-{uuid.uuid4().hex[:8]}",
        xsm_dead_letter_store=f"memory://{uuid.uuid4().hex}",
        xsm_attempt_markers="memory://",
    )
    return app


@pytest.fixture
def retried() -> Iterator[list[dict[str, Any]]]:
    """What each ``task_retry`` signal was sent with."""
    seen: list[dict[str, Any]] = []

    def record(sender: Any = None, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    task_retry.connect(record, weak=False)
    try:
        yield seen
    finally:
        task_retry.disconnect(record)


def failing_once(app: Celery) -> Any:
    """A chart task that fails with ConnectionError on its first run, retried after 5 s."""
    calls: list[int] = []

    @app.task(
        name=f"t.failing{uuid.uuid4().hex[:6]}",
        base=ChartTask,
        retry_policy=RetryPolicy(max_attempts=3, base_ms=5000, jitter="none"),
    )
    def fails_first() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("upstream refused")
        return "ok"

    return fails_first


def worker_tracer(app: Celery, task: Any) -> Any:
    """Assign the tracer as Celery's worker does when it starts, and return what it kept."""
    task.__trace__ = build_tracer(task.name, task, app.loader, HOSTNAME, app=app)
    return task.__trace__


def deliver(app: Celery, tracer: Any, task: Any) -> tuple[str, Any, Any]:
    """One delivery through ``tracer``, as the worker makes it: (task id, R, I)."""
    task_id = str(uuid.uuid4())
    request = {
        "id": task_id,
        "task": task.name,
        "headers": {},
        "retries": 0,
        "hostname": HOSTNAME,
        "delivery_info": {"exchange": "", "routing_key": app.conf.task_default_queue},
        "is_eager": False,
    }
    r, info, _, _ = tracer(task_id, [], {}, request)
    return task_id, r, info


def test_the_worker_tracer_of_a_chart_task_is_rebuilt_with_the_chart_trace_info(
    app: Celery,
) -> None:
    task = failing_once(app)
    celery_built = build_tracer(task.name, task, app.loader, HOSTNAME, app=app)
    task.__trace__ = celery_built
    kept = task.__trace__
    assert kept is not celery_built
    cells = dict(
        zip(kept.__code__.co_freevars, (c.cell_contents for c in kept.__closure__), strict=True)
    )
    assert cells["Info"] is ChartTraceInfo
    assert (cells["hostname"], cells["app"], cells["name"]) == (HOSTNAME, app, task.name)
    assert cells["loader_task_init"].__self__ is app.loader


def test_a_chart_retry_is_stored_signalled_and_republished_without_a_traceback_copy(
    app: Celery, retried: list[dict[str, Any]]
) -> None:
    task = failing_once(app)
    task_id, einfo, info = deliver(app, worker_tracer(app, task), task)
    assert info.state == "RETRY"
    assert type(einfo) is RetryInfo
    line = "xsm_celery.celery.task.tracer.ChartRetry: Retry in 5.0s: ConnectionError('upstream refused')\n"
    assert einfo.traceback == line
    assert type(einfo.exception.exc) is ChartRetry
    result = app.AsyncResult(task_id)
    assert result.state == "RETRY"
    assert result.traceback == line
    assert isinstance(result.result, ConnectionError)
    [signal] = retried
    assert signal["sender"] is app.tasks[task.name]
    assert signal["einfo"] is einfo
    assert signal["request"].id == task_id
    assert type(signal["reason"]) is ChartRetry
    [message] = drain_queue(app)
    assert message.headers["id"] == task_id
    assert message.headers["retries"] == 1
    assert message.headers["eta"] is not None


def test_the_retry_info_survives_the_pipe_from_a_prefork_child(app: Celery) -> None:
    task = failing_once(app)
    _, einfo, _ = deliver(app, worker_tracer(app, task), task)
    back = pickle.loads(pickle.dumps(einfo))
    assert back.traceback == einfo.traceback
    assert back.type is ChartRetry
    assert back.exc_info[2] is None
    # billiard rebuilds the wrapped exception on the way back, as for its own ExceptionInfo.
    assert isinstance(back.exception, ChartRetry)
    assert isinstance(back.exception.exc, ConnectionError)


def test_a_retry_the_function_raises_itself_keeps_celerys_full_traceback(
    app: Celery, retried: list[dict[str, Any]]
) -> None:
    @app.task(name=f"t.own{uuid.uuid4().hex[:6]}", base=ChartTask, bind=True)
    def retries_itself(self: Any) -> None:
        raise self.retry(countdown=5, exc=KeyError("own"))

    task_id, einfo, info = deliver(app, worker_tracer(app, retries_itself), retries_itself)
    assert info.state == "RETRY"
    assert type(einfo) is ExceptionInfo
    assert "in retries_itself" in einfo.traceback
    assert "in retries_itself" in app.AsyncResult(task_id).traceback
    assert type(retried[0]["reason"]) is Retry


def test_a_tracer_of_another_shape_is_kept_as_it_is(app: Celery) -> None:
    task = failing_once(app)

    class OtherInfo(TraceInfo):
        __slots__ = ()

    for tracer in (
        build_tracer(task.name, task, app.loader, HOSTNAME, app=app, Info=OtherInfo),
        build_tracer(task.name, task, app.loader, HOSTNAME, app=app, eager=True),
    ):
        task.__trace__ = tracer
        assert task.__trace__ is tracer
    task.__trace__ = None
    assert task.__trace__ is None


def test_a_tracer_unset_on_a_chart_task_is_none_as_on_any_task(app: Celery) -> None:
    task = failing_once(app)
    assert task.__trace__ is None
    assert ChartTask.__trace__ is None


def test_chart_retry_copies_the_scheduled_retry_without_building_a_new_one() -> None:
    scheduled = Retry(exc=ValueError("bad"), when=1.5)
    marked = chart_retry(scheduled)
    assert type(marked) is ChartRetry
    assert (marked.exc, marked.excs, marked.when, str(marked)) == (
        scheduled.exc,
        scheduled.excs,
        1.5,
        "Retry in 1.5s: ValueError('bad')",
    )
    assert marked.args == (marked, *scheduled.args[1:])
