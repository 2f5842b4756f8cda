"""RetryPolicy.logic() driving real charts: names, counters, give-up and snapshots."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.patterns.charts import retry_chart
from xsm_celery.engine import MachineLogic, SimulatedClock, SyncInterpreter, create_machine
from xsm_celery.patterns import ERRORS_CONTEXT_KEY, RetryPolicy


def failing(times: int) -> tuple[dict[str, int], Any]:
    calls = {"n": 0}

    def work(interp: Any, ctx: dict[str, Any], event: Any) -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise ConnectionError(f"boom #{calls['n']}")
        return "ok"

    return calls, work


def start(policy: RetryPolicy, work: Any, **context: Any) -> tuple[SyncInterpreter, SimulatedClock]:
    machine = create_machine(
        retry_chart(**context), logic=policy.logic().merge(MachineLogic(services={"work": work}))
    )
    clock = SimulatedClock()
    return SyncInterpreter(machine, clock=clock).start(), clock


def test_logic_names() -> None:
    """logic() provides the named delay, guards and actions under the prefix."""
    logic = RetryPolicy().logic()
    assert set(logic.delays) == {"retryDelay"}
    assert set(logic.guards) == {"retryCanRetry", "retryShouldRetry", "retryGiveUp"}
    assert set(logic.actions) == {"retryBump", "retryReset"}
    custom = RetryPolicy().logic(prefix="upload", attempt_key="tries")
    assert set(custom.delays) == {"uploadDelay"}
    assert "uploadCanRetry" in custom.guards
    assert {"uploadBump", "uploadReset"} == set(custom.actions)


def test_seed_retry_loop() -> None:
    """Three failures then success on the fourth attempt; retryReset zeroes the counter."""
    calls, work = failing(3)
    interp, clock = start(RetryPolicy(max_attempts=5, base_ms=100, jitter="none"), work)
    for _ in range(5):
        clock.increment(10_000)
    assert interp.matches("job.done")
    assert calls["n"] == 4
    assert interp.context["attempt"] == 0
    assert "attempt_delay_ms" not in interp.context


def test_retries_wait_exactly_the_delay() -> None:
    """The retry fires at the policy's delay, not a millisecond before."""
    calls, work = failing(10)
    _interp, clock = start(RetryPolicy(max_attempts=5, base_ms=100, jitter="none"), work)
    assert calls["n"] == 1
    clock.increment(99)
    assert calls["n"] == 1
    clock.increment(1)
    assert calls["n"] == 2
    clock.increment(199)
    assert calls["n"] == 2
    clock.increment(1)
    assert calls["n"] == 3


def test_gives_up_after_max_attempts() -> None:
    """max_attempts=3: three attempts, then the dead-letter state."""
    calls, work = failing(99)
    interp, clock = start(RetryPolicy(max_attempts=3, base_ms=100, jitter="none"), work)
    for _ in range(5):
        clock.increment(10_000)
    assert interp.matches("job.deadLettered")
    assert calls["n"] == 3
    assert interp.context["attempt"] == 3


def test_previous_delay_is_kept_in_context() -> None:
    """The delay in force is remembered in context['attempt_delay_ms'] (decorrelated reads it)."""
    rng = random.Random(3)
    policy = RetryPolicy(
        max_attempts=6, base_ms=100, max_ms=10_000, jitter="decorrelated", rng=rng.random
    )
    _, work = failing(99)
    interp, clock = start(policy, work)
    mirror = RetryPolicy(
        max_attempts=6,
        base_ms=100,
        max_ms=10_000,
        jitter="decorrelated",
        rng=random.Random(3).random,
    )
    expected = mirror.delay_ms(1)
    assert interp.context["attempt_delay_ms"] == expected
    clock.increment(expected)
    second = mirror.delay_ms(2, previous_ms=expected)
    assert interp.context["attempt_delay_ms"] == second
    assert 100 <= second <= 3 * expected


def test_two_loops_in_one_machine() -> None:
    """Custom prefixes and attempt keys let two retry loops share a machine without clashing."""
    chart = {
        "id": "two",
        "type": "parallel",
        "context": {"tries": 0, "sends": 0},
        "states": {
            "upload": {
                "initial": "go",
                "states": {
                    "go": {
                        "invoke": {
                            "src": "up",
                            "onError": {"target": "wait", "actions": "uploadBump"},
                        }
                    },
                    "wait": {
                        "after": {
                            "uploadDelay": [
                                {"guard": "uploadCanRetry", "target": "go"},
                                {"target": "gaveUp"},
                            ]
                        }
                    },
                    "gaveUp": {"type": "final"},
                },
            },
            "notify": {
                "initial": "go",
                "states": {
                    "go": {
                        "invoke": {
                            "src": "note",
                            "onError": {"target": "wait", "actions": "notifyBump"},
                        }
                    },
                    "wait": {
                        "after": {
                            "notifyDelay": [
                                {"guard": "notifyCanRetry", "target": "go"},
                                {"target": "gaveUp"},
                            ]
                        }
                    },
                    "gaveUp": {"type": "final"},
                },
            },
        },
    }

    def fail(interp: Any, ctx: Any, event: Any) -> None:
        raise OSError("down")

    logic = (
        RetryPolicy(max_attempts=2, base_ms=10, jitter="none")
        .logic(prefix="upload", attempt_key="tries")
        .merge(
            RetryPolicy(max_attempts=4, base_ms=10, jitter="none").logic(
                prefix="notify", attempt_key="sends"
            )
        )
        .merge(MachineLogic(services={"up": fail, "note": fail}))
    )
    clock = SimulatedClock()
    interp = SyncInterpreter(create_machine(chart, logic=logic), clock=clock).start()
    for _ in range(10):
        clock.increment(1_000)
    assert interp.context["tries"] == 2
    assert interp.context["sends"] == 4


def test_give_up_on_dead_letters_without_waiting() -> None:
    """A give_up_on error: the bump marks it, the delay is 0 and CanRetry says no."""
    calls = {"n": 0}

    def work(interp: Any, ctx: Any, event: Any) -> None:
        calls["n"] += 1
        raise PermissionError("card declined")

    policy = RetryPolicy(
        max_attempts=5, base_ms=1_000, jitter="none", give_up_on=(PermissionError,)
    )
    interp, clock = start(policy, work)
    clock.increment(0)
    assert interp.matches("job.deadLettered")
    assert calls["n"] == 1
    assert interp.context["attempt"] == 1


def test_retry_on_limits_what_is_retried() -> None:
    """retry_on=(ConnectionError,): a ValueError is not retried."""

    def work(interp: Any, ctx: Any, event: Any) -> None:
        raise ValueError("bad payload")

    interp, clock = start(RetryPolicy(max_attempts=5, retry_on=ConnectionError), work)
    clock.increment(0)
    assert interp.matches("job.deadLettered")


def test_should_retry_and_give_up_guards_branch_on_error() -> None:
    """retryGiveUp in an onError branch sends non-retryable errors straight to the dead-letter state."""
    chart = retry_chart()
    chart["states"]["attempting"]["invoke"]["onError"] = [
        {"guard": "retryGiveUp", "target": "deadLettered", "actions": "retryBump"},
        {"guard": "retryShouldRetry", "target": "retrying", "actions": "retryBump"},
    ]
    errors = iter([ConnectionError("flaky"), KeyError("missing")])

    def work(interp: Any, ctx: Any, event: Any) -> None:
        raise next(errors)

    policy = RetryPolicy(max_attempts=5, base_ms=10, jitter="none", give_up_on=KeyError)
    machine = create_machine(
        chart, logic=policy.logic().merge(MachineLogic(services={"work": work}))
    )
    clock = SimulatedClock()
    interp = SyncInterpreter(machine, clock=clock).start()
    assert interp.matches("job.retrying")
    clock.increment(10)
    assert interp.matches("job.deadLettered")
    assert interp.context["attempt"] == 2


def test_reset_clears_counter_delay_and_error_chain() -> None:
    """retryReset zeroes the counter and drops the remembered delay and the error chain."""
    reset = RetryPolicy().logic().actions["retryReset"]
    ctx: dict[str, Any] = {
        "attempt": 4,
        "attempt_delay_ms": 800.0,
        ERRORS_CONTEXT_KEY: [{"message": "x"}],
    }
    reset(None, ctx, None, None)
    assert ctx == {"attempt": 0}


def test_delay_tolerates_odd_context_values() -> None:
    """A missing, zero or unreadable counter counts as the first attempt; a bad stored delay is ignored."""
    delay = RetryPolicy(base_ms=100, jitter="none").logic().delays["retryDelay"]
    for ctx in (
        {},
        {"attempt": 0},
        {"attempt": "x"},
        {"attempt": float("nan")},
        {"attempt": 1, "attempt_delay_ms": "bad"},
    ):
        assert delay(dict(ctx), None) == 100


def test_refire_from_an_older_snapshot_does_not_double_bump() -> None:
    """Replaying a step from the snapshot saved before it (a crashed save) bumps once, not twice."""
    _, work = failing(99)
    policy = RetryPolicy(max_attempts=5, base_ms=100, jitter="none")
    interp, clock = start(policy, work)
    saved = interp.get_snapshot()
    assert interp.context["attempt"] == 1
    clock.increment(100)
    assert interp.context["attempt"] == 2
    interp.stop()
    logic = policy.logic().merge(MachineLogic(services={"work": work}))
    again = SyncInterpreter.from_snapshot(
        saved, create_machine(retry_chart(), logic=logic), clock=clock
    )
    again.start() if again.status == "not_started" else None
    clock.increment(100)
    assert again.context["attempt"] == 2


@pytest.mark.parametrize("mode", ["none", "full", "equal", "decorrelated"])
def test_every_mode_drives_the_chart(mode: str) -> None:
    """Each jitter mode retries to the dead-letter state within max_attempts."""
    calls, work = failing(99)
    interp, clock = start(
        RetryPolicy(max_attempts=4, base_ms=50, jitter=mode, rng=random.Random(5).random), work
    )
    for _ in range(10):
        clock.increment(100_000)
    assert interp.matches("job.deadLettered")
    assert calls["n"] == 4
