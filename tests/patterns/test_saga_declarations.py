"""SagaBuilder refuses bad declarations up front, with the Troubleshooting table's messages."""

from __future__ import annotations

from typing import Any

import pytest

from xsm_celery.patterns import RetryPolicy, SagaBuilder


@pytest.mark.parametrize("name", ["reserve-stock", "1st", "", "class", "a.b", 7])
def test_step_name_must_be_an_identifier(name: Any) -> None:
    """A step name that is not an identifier is refused, naming the fix."""
    with pytest.raises(ValueError, match=r"step name .* must be an identifier"):
        SagaBuilder("fulfil").step(name, invoke="svc")


def test_duplicate_step_is_refused() -> None:
    """Declaring the same step twice is refused."""
    saga = SagaBuilder("fulfil").step("reserve", invoke="a")
    with pytest.raises(ValueError, match="duplicate step 'reserve'"):
        saga.step("reserve", invoke="b")


def test_a_step_named_like_a_retrying_state_is_refused_either_order() -> None:
    """A step called '<x>Retrying' collides with the state a retry= step x owns."""
    policy = RetryPolicy(max_attempts=2)
    first = SagaBuilder("s").step("reserve", invoke="a", retry=policy)
    with pytest.raises(ValueError, match="collides with step 'reserveRetrying'"):
        first.step("reserveRetrying", invoke="b")
    second = SagaBuilder("s").step("reserveRetrying", invoke="b")
    with pytest.raises(ValueError, match="collides with step 'reserveRetrying'"):
        second.step("reserve", invoke="a", retry=policy)
    assert [s.name for s in second.steps] == ["reserveRetrying"]


def test_without_retry_there_is_no_collision() -> None:
    """Without retry= no Retrying state exists, so the name is free."""
    saga = SagaBuilder("s").step("reserve", invoke="a").step("reserveRetrying", invoke="b")
    assert len(saga.steps) == 2


@pytest.mark.parametrize("value", [0, -5, 1.5, "5000", True])
def test_timeout_must_be_a_positive_int(value: Any) -> None:
    """timeout_ms must be a positive int of milliseconds."""
    with pytest.raises(ValueError, match="timeout_ms must be a positive int"):
        SagaBuilder("s").step("a", invoke="svc", timeout_ms=value)


@pytest.mark.parametrize("value", [3, {"max_attempts": 3}, "RetryPolicy"])
def test_retry_must_be_a_retry_policy(value: Any) -> None:
    """retry= takes a RetryPolicy only."""
    with pytest.raises(ValueError, match="retry must be a RetryPolicy"):
        SagaBuilder("s").step("a", invoke="svc", retry=value)


@pytest.mark.parametrize("value", ["", "   ", None, 3])
def test_invoke_must_be_a_non_empty_string(value: Any) -> None:
    """invoke= must name a service."""
    with pytest.raises(ValueError, match="invoke must be a non-empty string"):
        SagaBuilder("s").step("a", invoke=value)


def test_compensate_must_be_a_non_empty_string_when_given() -> None:
    """compensate= is None or a service key."""
    with pytest.raises(ValueError, match="compensate must be a non-empty string"):
        SagaBuilder("s").step("a", invoke="svc", compensate="")


@pytest.mark.parametrize(
    "event",
    ["done.invoke.reserve", "error.platform.x", "done.state.x", "after.1000", "xstate.init"],
)
def test_start_event_may_not_be_engine_reserved(event: str) -> None:
    """An engine event name as start_event is refused: no caller could ever send it."""
    with pytest.raises(ValueError, match="is an engine-reserved event name"):
        SagaBuilder("s", start_event=event)


@pytest.mark.parametrize("event", ["", "*", 5])
def test_start_event_must_be_a_plain_name(event: Any) -> None:
    """An empty or wildcard start event is refused."""
    with pytest.raises(ValueError, match="start_event must be a plain event name"):
        SagaBuilder("s", start_event=event)


def test_build_needs_at_least_one_step() -> None:
    """build() before any step() is refused."""
    with pytest.raises(ValueError, match="a saga needs at least one step"):
        SagaBuilder("fulfil").build()


@pytest.mark.parametrize("name", ["ful-fil", "", "a.b"])
def test_saga_name_must_be_an_identifier(name: str) -> None:
    """The saga name is the chart id and event prefix, so it must be an identifier."""
    with pytest.raises(ValueError, match=r"saga name .* must be an identifier"):
        SagaBuilder(name)


def test_on_failure_needs_action_names() -> None:
    """on_failure() with nothing, or with an empty name, is refused."""
    with pytest.raises(ValueError, match="at least one action"):
        SagaBuilder("s").on_failure()
    with pytest.raises(ValueError, match="on_failure action must be a non-empty string"):
        SagaBuilder("s").on_failure("")
