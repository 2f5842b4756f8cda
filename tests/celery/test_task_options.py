"""ChartTask options: Celery's retry options refused, charts checked once, policies merged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from xsm_celery.celery import ChartTask, WorkerLost
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns import RetryPolicy


@pytest.fixture
def app() -> Iterator[Celery]:
    """A fresh app whose tasks bind as soon as they are declared."""
    celery_app = Celery("options", set_as_current=False)
    celery_app.conf.xsm_dead_letter_store = "memory://options"
    celery_app.finalize()
    yield celery_app
    celery_app.close()


def bound(task: Any) -> Any:
    """The per-task constants ChartTask built when the task was bound."""
    return type(task)._xsm_bound


@pytest.mark.parametrize(
    "option",
    [
        {"autoretry_for": (ConnectionError,)},
        {"max_retries": 3},
        {"retry_backoff": True},
        {"retry_kwargs": {"max_retries": 2}},
        {"default_retry_delay": 5},
    ],
)
def test_celerys_own_retry_options_are_refused(app: Celery, option: dict[str, Any]) -> None:
    """autoretry_for, max_retries and friends would run a second retry loop: refused."""
    name = next(iter(option))
    with pytest.raises(ConfigurationError, match=f"{name}=.*retry_policy=RetryPolicy"):

        @app.task(shared=False, base=ChartTask, **option)
        def charge() -> None: ...


def test_a_retry_policy_of_the_wrong_type_is_refused(app: Celery) -> None:
    """retry_policy must be a RetryPolicy, not a dict of its arguments."""
    with pytest.raises(ConfigurationError, match="must be a RetryPolicy"):

        @app.task(shared=False, base=ChartTask, retry_policy={"max_attempts": 3})
        def charge() -> None: ...


def test_late_acknowledgement_is_the_default(app: Celery) -> None:
    """Chart tasks acknowledge late and requeue when the worker is lost, unless told not to."""

    @app.task(shared=False, base=ChartTask)
    def a() -> None: ...

    @app.task(shared=False, base=ChartTask, acks_late=False)
    def b() -> None: ...

    assert a.acks_late is True
    assert a.reject_on_worker_lost is True
    assert b.acks_late is False


def test_give_up_on_and_retry_on_are_folded_into_the_policy(app: Celery) -> None:
    """give_up_on adds to the policy's list; retry_on keeps WorkerLost retryable."""
    policy = RetryPolicy(max_attempts=7, base_ms=11, give_up_on=(KeyError,))

    @app.task(
        shared=False,
        base=ChartTask,
        retry_policy=policy,
        give_up_on=ValueError,
        retry_on=(OSError,),
    )
    def charge() -> None: ...

    effective = bound(charge).policy
    assert effective.max_attempts == 7
    assert effective.base_ms == 11
    assert effective.give_up_on == (KeyError, ValueError)
    assert effective.should_retry(WorkerLost("lost"))
    assert effective.should_retry(OSError("disk"))
    assert not effective.should_retry(RuntimeError("other"))


def test_a_chart_that_never_invokes_work_is_refused(app: Celery) -> None:
    """A chart with no ``work`` invoke could never run the task."""
    chart = {
        "id": "x",
        "initial": "a",
        "states": {"a": {"type": "final", "tags": ["dead-letter"]}},
    }
    with pytest.raises(ConfigurationError, match="never invokes 'work'"):

        @app.task(shared=False, base=ChartTask, retry_chart=chart)
        def charge() -> None: ...


def test_a_chart_without_a_dead_letter_state_is_refused(app: Celery) -> None:
    """A chart with no state tagged dead-letter could never give up."""
    chart = {
        "id": "x",
        "initial": "a",
        "states": {
            "a": {"invoke": {"src": "work", "onDone": "b", "onError": "b"}},
            "b": {"type": "final"},
        },
    }
    with pytest.raises(ConfigurationError, match="no state tagged 'dead-letter'"):

        @app.task(shared=False, base=ChartTask, retry_chart=chart)
        def charge() -> None: ...


def test_an_invalid_chart_is_refused_with_the_node_path(app: Celery) -> None:
    """A target that names no state fails at registration, naming the task and the node."""
    chart = {
        "id": "x",
        "initial": "a",
        "states": {"a": {"invoke": {"src": "work", "onDone": "nowhere"}}},
    }
    with pytest.raises(ConfigurationError, match=r"task '.*charge'.*nowhere"):

        @app.task(shared=False, base=ChartTask, retry_chart=chart)
        def charge() -> None: ...


def test_a_chart_naming_logic_the_task_lacks_is_refused(app: Celery) -> None:
    """A custom chart that uses an action nobody provides is refused at registration."""
    chart = {
        "id": "x",
        "initial": "a",
        "states": {
            "a": {
                "invoke": {
                    "src": "work",
                    "onDone": "b",
                    "onError": {"target": "c", "actions": "page"},
                }
            },
            "b": {"type": "final"},
            "c": {"type": "final", "tags": ["dead-letter"]},
        },
    }
    with pytest.raises(ConfigurationError, match="unknown action 'page'"):

        @app.task(shared=False, base=ChartTask, retry_chart=chart)
        def charge() -> None: ...


def test_class_based_chart_tasks_bind_too(app: Celery) -> None:
    """A ChartTask subclass registered with register_task is checked and built the same way."""

    class Ship(ChartTask):
        name = "shop.ship"
        retry_policy = RetryPolicy(max_attempts=2)

        def run(self, order_id: str) -> str:
            return order_id

    task = app.register_task(Ship())
    assert bound(task).machine.id == "task"
    assert list(bound(task).signature.parameters) == ["order_id"]
