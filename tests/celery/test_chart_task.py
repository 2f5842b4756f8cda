"""ChartTask run eagerly (``Task.apply``): the chart's decisions, the dead letter, Celery hooks."""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import Ignore, Reject
from celery.signals import task_failure

from xsm_celery.celery import HEADER, ChartTask, TaskGaveUp
from xsm_celery.patterns import DeadLetter, RetryPolicy
from xsm_celery.sqlalchemy.urls import open_dead_letter_store


@pytest.fixture
def app() -> Iterator[Celery]:
    """A Celery app whose dead letters go to a fresh named memory store."""
    celery_app = Celery(f"eager-{uuid.uuid4().hex[:6]}", set_as_current=False)
    celery_app.conf.xsm_dead_letter_store = f"memory://{uuid.uuid4().hex}"
    yield celery_app
    celery_app.close()


def store_of(app: Celery) -> Any:
    """The app's dead-letter store."""
    return open_dead_letter_store(app.conf.xsm_dead_letter_store)


def test_success_on_the_first_attempt_returns_the_value(app: Celery) -> None:
    """A function that returns at once: SUCCESS with its value and no dead letter."""

    @app.task(shared=False, base=ChartTask)
    def double(x: int) -> int:
        return x * 2

    result = double.apply((21,))
    assert result.state == "SUCCESS"
    assert result.result == 42
    assert store_of(app).all() == []


def test_retries_run_under_the_same_id_with_the_snapshot_header(app: Celery) -> None:
    """Each eager retry is the same task id and carries the chart snapshot in its headers."""
    seen: list[tuple[str, int, Any]] = []

    @app.task(
        shared=False, base=ChartTask, bind=True, retry_policy=RetryPolicy(base_ms=5, jitter="none")
    )
    def flaky(self: Any) -> str:
        seen.append(
            (self.request.id, self.request.retries, (self.request.headers or {}).get(HEADER))
        )
        if len(seen) < 3:
            raise ConnectionError("again")
        return "ok"

    result = flaky.apply()
    assert result.result == "ok"
    assert len({task_id for task_id, _, _ in seen}) == 1
    assert [retries for _, retries, _ in seen] == [0, 1, 2]
    assert seen[0][2] is None
    assert '"retrying"' in seen[1][2]


def test_exhaustion_writes_one_full_dead_letter(app: Celery) -> None:
    """Three failures: FAILURE with the last error and one redacted record, oldest error first."""

    @app.task(
        shared=False,
        base=ChartTask,
        retry_policy=RetryPolicy(max_attempts=3, base_ms=1, jitter="none"),
    )
    def charge(order_id: str, card_token: str, *, amount: int, api_key: str) -> None:
        raise ConnectionError(f"gateway 503 for {order_id} (try {len(store_of(app).all())})")

    result = charge.apply(("o-1", "tok_live_77"), {"amount": 5, "api_key": "sk-live-1"})
    assert result.state == "FAILURE"
    assert isinstance(result.result, ConnectionError)
    (record,) = store_of(app).all()
    assert isinstance(record, DeadLetter)
    assert record.task_name == charge.name
    assert record.task_id == result.id
    assert record.attempts == 3
    assert record.reason == "task_exhausted"
    assert record.task_args == ["o-1", "***"]
    assert record.task_kwargs == {"amount": 5, "api_key": "***"}
    assert [e["type"] for e in record.errors] == ["ConnectionError"] * 3
    assert record.errors[0]["source"] == "service"
    assert record.state_id == "task.deadLettered"
    assert record.machine_id == "task"
    assert (
        record.machine_hash == type(charge._get_current_object())._xsm_bound.machine.structure_hash
    )
    assert "_xsm_errors" not in record.snapshot["context"]
    assert record.hostname


def test_give_up_on_dead_letters_on_the_first_failure(app: Celery) -> None:
    """An exception listed in give_up_on is not retried: attempts 1, reason non_retryable."""
    calls: list[int] = []

    @app.task(shared=False, base=ChartTask, give_up_on=(ValueError,))
    def validate(x: int) -> None:
        calls.append(x)
        raise ValueError("negative amount")

    result = validate.apply((1,))
    assert isinstance(result.result, ValueError)
    assert calls == [1]
    (record,) = store_of(app).all()
    assert record.reason == "non_retryable"
    assert record.attempts == 1


def test_retry_on_limits_what_is_retried(app: Celery) -> None:
    """With retry_on=(ConnectionError,), a KeyError dead-letters at once."""

    @app.task(shared=False, base=ChartTask, retry_on=(ConnectionError,))
    def lookup() -> None:
        raise KeyError("sku-1")

    assert isinstance(lookup.apply().result, KeyError)
    assert store_of(app).all()[0].reason == "non_retryable"


def test_policy_rng_gives_the_exact_countdowns(app: Celery) -> None:
    """The countdown handed to Task.retry is delay_ms / 1000 exactly (no rounding)."""
    countdowns: list[float] = []
    original = ChartTask.retry

    class Recording(ChartTask):
        def retry(self, *args: Any, **kwargs: Any) -> Any:
            countdowns.append(kwargs["countdown"])
            return original(self, *args, **kwargs)

    policy = RetryPolicy(max_attempts=4, base_ms=333, jitter="full", rng=random.Random(5).random)

    @app.task(shared=False, base=Recording, retry_policy=policy)
    def flaky() -> None:
        raise ConnectionError("x")

    flaky.apply()
    fresh = RetryPolicy(max_attempts=4, base_ms=333, jitter="full", rng=random.Random(5).random)
    assert countdowns == [fresh.delay_ms(n) / 1000.0 for n in (1, 2, 3)]


def test_celery_control_exceptions_pass_through(app: Celery) -> None:
    """Ignore raised by the task is Celery's, not a failure: no retry, no dead letter."""

    @app.task(shared=False, base=ChartTask)
    def skip() -> None:
        raise Ignore()

    result = skip.apply()
    assert result.state == "IGNORED"
    assert store_of(app).all() == []


def test_reject_reaches_celery_untouched(app: Celery) -> None:
    """Reject raised by the task is handed to Celery (REJECTED), not retried or dead-lettered."""
    calls: list[int] = []

    @app.task(shared=False, base=ChartTask)
    def poison() -> None:
        calls.append(1)
        raise Reject("malformed payload", requeue=False)

    result = poison.apply()
    assert result.state == "REJECTED"
    assert calls == [1]
    assert store_of(app).all() == []


def test_on_failure_and_task_failure_signal_see_the_users_exception(app: Celery) -> None:
    """Celery's on_failure hook and task_failure signal fire once, with the last exception."""
    seen: list[str] = []

    class Hooked(ChartTask):
        def on_failure(self, exc: Any, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
            seen.append(f"on_failure:{type(exc).__name__}")

    def handler(sender: Any = None, exception: Any = None, **_: Any) -> None:
        seen.append(f"signal:{type(exception).__name__}")

    @app.task(shared=False, base=Hooked, retry_policy=RetryPolicy(max_attempts=2, base_ms=1))
    def flaky() -> None:
        raise OSError("disk full")

    task_failure.connect(handler, sender=flaky, weak=False)
    try:
        flaky.apply()
    finally:
        task_failure.disconnect(handler, sender=flaky)
    assert seen == ["on_failure:OSError", "signal:OSError"]


def test_a_direct_call_runs_the_plain_function(app: Celery) -> None:
    """Calling the task object directly runs the function once: no chart, no retry."""

    @app.task(shared=False, base=ChartTask)
    def boom() -> None:
        raise ConnectionError("direct")

    with pytest.raises(ConnectionError):
        boom()
    assert store_of(app).all() == []


def test_a_failing_store_spools_the_record_and_still_fails_the_task(
    app: Celery, caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    """If the dead-letter store raises, the record waits in the spool and the task is FAILURE."""
    from xsm_celery.celery.deadletter.spool import DeadLetterSpool

    class Down:
        def put(self, record: DeadLetter) -> str:
            raise OSError("database is down")

    app.conf.xsm_dead_letter_store = Down()
    app.conf.xsm_dead_letter_spool = str(tmp_path / "spool")

    @app.task(shared=False, base=ChartTask, retry_policy=RetryPolicy(max_attempts=1))
    def once() -> None:
        raise ConnectionError("nope")

    with caplog.at_level(logging.WARNING, logger="xsm_celery.celery.deadletter.writer"):
        result = once.apply()
    assert result.state == "FAILURE"
    assert result.id in caplog.text
    spool = DeadLetterSpool(tmp_path / "spool")
    (record_id,) = list(spool.ids())
    record = spool.get(record_id)
    assert record is not None
    assert record.task_id == result.id
    assert record.reason == "task_exhausted"


def test_a_chart_that_gives_up_without_an_error_fails_with_task_gave_up(app: Celery) -> None:
    """A custom chart that dead-letters on success ends FAILURE with TaskGaveUp."""
    chart = {
        "id": "odd",
        "initial": "attempting",
        "states": {
            "attempting": {"invoke": {"src": "work", "onDone": "bad", "onError": "bad"}},
            "bad": {"type": "final", "tags": ["dead-letter"]},
        },
    }

    @app.task(shared=False, base=ChartTask, retry_chart=chart)
    def fine() -> int:
        return 1

    result = fine.apply()
    assert isinstance(result.result, TaskGaveUp)
    assert store_of(app).all()[0].state_id == "odd.bad"


def test_a_zero_delay_is_still_a_celery_retry(app: Celery) -> None:
    """base_ms=0 retries through Celery (countdown 0), one attempt per run, never in-run."""
    calls: list[int] = []

    @app.task(
        shared=False, base=ChartTask, bind=True, retry_policy=RetryPolicy(max_attempts=4, base_ms=0)
    )
    def instant(self: Any) -> int:
        calls.append(self.request.retries)
        if len(calls) < 4:
            raise ConnectionError("again")
        return len(calls)

    assert instant.apply().result == 4
    assert calls == [0, 1, 2, 3]
