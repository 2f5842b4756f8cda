"""The in-process retry loop and the seed's decision chain on ``RetryPolicy``."""

from __future__ import annotations

import asyncio
import time

import pytest

from xsm_celery.errors import DeadlineExceededError, PolicyError, RetryExhaustedError
from xsm_celery.hooks import FactKind, subscribe
from xsm_celery.patterns import RetryPolicy, acall_with_retry, call_with_retry, deadline, retry


def quick(**options: object) -> RetryPolicy:
    """A policy with no waiting, so the tests run at once."""
    values: dict[str, object] = {"max_attempts": 3, "base_ms": 0, "jitter": "none"}
    values.update(options)
    return RetryPolicy(**values)  # type: ignore[arg-type]


class Script:
    """Plays back outcomes: an exception instance is raised, anything else returned."""

    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def __call__(self) -> object:
        outcome = self.outcomes[min(self.calls, len(self.outcomes) - 1)]
        self.calls += 1
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def test_a_transient_failure_is_retried_to_success() -> None:
    """Two failures then a value: the value is returned after three calls."""
    script = Script(OSError("a"), OSError("b"), "ok")
    assert call_with_retry(quick(), script) == "ok"
    assert script.calls == 3


def test_out_of_attempts_raises_retry_exhausted() -> None:
    """The last failure becomes the cause of ``RetryExhaustedError``."""
    script = Script(OSError("down"))
    with pytest.raises(RetryExhaustedError) as info:
        call_with_retry(quick(), script)
    assert isinstance(info.value, PolicyError)
    assert (info.value.attempts, info.value.reason) == (3, "exhausted")
    assert isinstance(info.value.__cause__, OSError)
    assert script.calls == 3


def test_abort_on_is_never_retried() -> None:
    """An ``abort_on`` failure is re-raised unchanged on the first attempt."""
    script = Script(PermissionError("no"))
    with pytest.raises(PermissionError):
        call_with_retry(quick(abort_on=PermissionError), script)
    assert script.calls == 1


def test_abort_if_stops_on_a_matching_failure() -> None:
    """``abort_if`` inspects the failure itself and stops the loop."""
    script = Script(OSError("fatal disk"), "never")
    policy = quick(abort_if=lambda exc: "fatal" in str(exc))
    with pytest.raises(OSError, match="fatal"):
        call_with_retry(policy, script)
    assert script.calls == 1


def test_retry_if_narrows_retry_on() -> None:
    """Only failures of a ``retry_on`` type for which ``retry_if`` holds are retried."""
    policy = quick(retry_on=OSError, retry_if=lambda exc: "503" in str(exc))
    assert call_with_retry(policy, Script(OSError("503"), "ok")) == "ok"
    with pytest.raises(OSError, match="404"):
        call_with_retry(policy, Script(OSError("404"), "ok"))


def test_retry_on_result_retries_a_pending_value() -> None:
    """A value ``retry_on_result`` refuses is tried again; exhaustion says ``result``."""
    policy = quick(retry_on_result=lambda value: value == "pending")
    assert call_with_retry(policy, Script("pending", "done")) == "done"
    with pytest.raises(RetryExhaustedError) as info:
        call_with_retry(policy, Script("pending"))
    assert (info.value.reason, info.value.last_error) == ("result", None)


def test_a_predicate_that_raises_stops_the_loop() -> None:
    """A bug in ``retry_if`` counts as "do not retry", never as a loop."""
    policy = quick(retry_if=lambda exc: 1 / 0)
    assert policy.should_retry(OSError()) is False
    assert quick(abort_if=lambda exc: 1 / 0).should_retry(OSError()) is False


def test_the_decision_chain_leaves_seed_000_behaviour_alone() -> None:
    """With no predicates the policy decides exactly as before: by type only."""
    policy = RetryPolicy(retry_on=OSError, give_up_on=FileNotFoundError)
    assert [policy.should_retry(e) for e in (OSError(), FileNotFoundError(), KeyError())] == [
        True,
        False,
        False,
    ]
    assert policy.should_retry("a payload") is True
    assert policy.should_retry_result("anything") is False


def test_abort_on_joins_give_up_on() -> None:
    """The seed's ``abort_on`` is one list with ``give_up_on``, so the chart honours it too."""
    policy = RetryPolicy(give_up_on=KeyError, abort_on=PermissionError)
    assert policy.give_up_on == (KeyError, PermissionError)


def test_bad_predicates_are_refused() -> None:
    """A predicate that is not callable is a ``TypeError`` naming it."""
    with pytest.raises(TypeError, match="retry_if"):
        RetryPolicy(retry_if="yes")  # type: ignore[arg-type]


def test_delays_are_slept_between_attempts() -> None:
    """Two retries at 30 ms each take at least 60 ms."""
    started = time.monotonic()
    call_with_retry(quick(base_ms=30, factor=1), Script(OSError(), OSError(), "ok"))
    assert time.monotonic() - started >= 0.055


def test_a_delay_past_the_deadline_stops_early() -> None:
    """A retry whose delay would outlive the open deadline stops at once, not at the deadline."""
    started = time.monotonic()
    with deadline(0.5, name="request"), pytest.raises(DeadlineExceededError) as info:
        call_with_retry(quick(base_ms=1_000), Script(OSError("first"), "ok"))
    assert time.monotonic() - started < 0.4
    assert (info.value.name, info.value.timeout_s) == ("request", 0.5)
    assert isinstance(info.value.__cause__, OSError)


def test_async_retries_and_the_decorator() -> None:
    """``acall_with_retry`` and ``@retry`` retry coroutines the same way."""
    calls = []

    @retry(max_attempts=3, base_ms=0)
    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("again")
        return "ok"

    assert asyncio.run(flaky()) == "ok"
    assert asyncio.run(acall_with_retry(quick(), Script(OSError(), "fine"))) == "fine"


def test_attempts_and_exhaustion_are_facts() -> None:
    """``RETRY_ATTEMPTED`` per retry and ``RETRY_EXHAUSTED`` at the end, with bounded fields."""
    seen = []
    stop = subscribe(seen.append)
    try:
        with pytest.raises(RetryExhaustedError):
            call_with_retry(quick(max_attempts=2), Script(OSError("x")))
    finally:
        stop()
    kinds = [
        (f.kind, dict(f.fields))
        for f in seen
        if f.kind.value.startswith("retry_") and f.fields.get("call") == "Script"
    ]
    assert kinds == [
        (FactKind.RETRY_ATTEMPTED, {"call": "Script", "attempt": 1, "outcome": "OSError"}),
        (FactKind.RETRY_EXHAUSTED, {"call": "Script", "attempts": 2, "reason": "exhausted"}),
    ]
