"""run_chart across message boundaries: one attempt per run, exact delays, give-up in the last run."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import pytest
from celery.exceptions import Ignore
from hypothesis import given, settings
from hypothesis import strategies as st

from xsm_celery.celery.task.attempt import Run, Settled, Verdict, run_chart
from xsm_celery.celery.task.chart_task import CONTROL_EXCEPTIONS
from xsm_celery.celery.task.charts import load_task_chart
from xsm_celery.celery.task.header import ChartHeader, HeaderCodec
from xsm_celery.celery.task.machine import build_task_machine
from xsm_celery.errors import ConfigurationError, WorkerLost
from xsm_celery.patterns import ERRORS_CONTEXT_KEY, RetryPolicy


def machine_for(policy: RetryPolicy, chart: Any = None) -> Any:
    """The machine a ChartTask with ``policy`` would run."""
    return build_task_machine("t", chart, policy, control=CONTROL_EXCEPTIONS)


def header(machine: Any, snapshot: str | None, max_attempts: int = 6) -> ChartHeader | None:
    """The checked header a message carrying ``snapshot`` gives the next run."""
    codec = HeaderCodec.for_task("t", machine, RetryPolicy(max_attempts=max_attempts), None)
    return codec.decode(None if snapshot is None else codec.encode(snapshot, "t-1"), "t-1")


def failing(times: int, calls: list[int]) -> Callable[[], str]:
    """A function that fails ``times`` times, then returns "ok"; ``calls`` counts calls."""

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise ConnectionError(f"failure {len(calls)}")
        return "ok"

    return call


def drive(machine: Any, call: Callable[[], Any], limit: int = 20) -> tuple[Settled, list[float]]:
    """Run like Celery would: each retry's snapshot goes into the next run's message."""
    snapshot: str | None = None
    delays: list[float] = []
    for _ in range(limit):
        outcome = run_chart(machine, header(machine, snapshot), Run(call=call))
        if outcome.verdict is not Verdict.RETRY:
            return outcome, delays
        assert outcome.delay_ms is not None
        delays.append(outcome.delay_ms)
        snapshot = outcome.interpreter.get_snapshot()
    raise AssertionError("the chart never settled")


def expected_delays(policy_args: dict[str, Any], seed: int, count: int) -> list[float]:
    """The delays a fresh policy with the same seed gives, chaining the previous delay."""
    policy = RetryPolicy(**policy_args, rng=random.Random(seed).random)
    delays: list[float] = []
    previous = None
    for attempt in range(1, count + 1):
        previous = policy.delay_ms(attempt, previous_ms=previous)
        delays.append(previous)
    return delays


POLICIES = st.fixed_dictionaries(
    {
        "max_attempts": st.integers(1, 6),
        "base_ms": st.floats(0, 5_000),
        "factor": st.floats(1, 3),
        "jitter": st.sampled_from(["none", "full", "equal", "decorrelated"]),
    }
)


@settings(max_examples=60, deadline=None)
@given(args=POLICIES, seed=st.integers(0, 2**32), failures=st.integers(0, 8))
def test_runs_follow_the_policy_exactly(args: dict[str, Any], seed: int, failures: int) -> None:
    """Calls = min(failures+1, max_attempts); delays equal a fresh seeded policy's; give-up in run."""
    max_attempts = args["max_attempts"]
    machine = machine_for(RetryPolicy(**args, rng=random.Random(seed).random))
    calls: list[int] = []
    outcome, delays = drive(machine, failing(failures, calls))
    if failures < max_attempts:
        assert outcome.verdict is Verdict.DONE
        assert outcome.run.result == "ok"
        assert len(calls) == failures + 1
        assert delays == expected_delays(args, seed, failures)
    else:
        assert outcome.verdict is Verdict.GIVE_UP
        assert len(calls) == max_attempts
        assert delays == expected_delays(args, seed, max_attempts - 1)
        chain = outcome.interpreter.context[ERRORS_CONTEXT_KEY]
        assert [e["message"] for e in chain] == [f"failure {n}" for n in range(1, max_attempts + 1)]


def test_a_lost_attempt_is_recorded_instead_of_running_the_function() -> None:
    """With run.lost set, the function is not called and WorkerLost enters the chain."""
    machine = machine_for(RetryPolicy(max_attempts=3, base_ms=10, jitter="none"))
    calls: list[int] = []
    run = Run(call=failing(0, calls), lost=WorkerLost("died"))
    outcome = run_chart(machine, None, run)
    assert outcome.verdict is Verdict.RETRY
    assert calls == []
    assert isinstance(run.error, WorkerLost)
    assert outcome.interpreter.context[ERRORS_CONTEXT_KEY][0]["type"] == "WorkerLost"


def test_the_marker_is_written_before_each_attempt_with_its_number() -> None:
    """mark(n) is called with 1, 2, 3 as the attempts run, before the function."""
    machine = machine_for(RetryPolicy(max_attempts=3, base_ms=1, jitter="none"))
    marks: list[int] = []
    calls: list[int] = []
    snapshot = None
    for _ in range(3):
        outcome = run_chart(
            machine, header(machine, snapshot), Run(call=failing(5, calls), mark=marks.append)
        )
        snapshot = outcome.interpreter.get_snapshot()
    assert marks == [1, 2, 3]
    assert outcome.verdict is Verdict.GIVE_UP


def test_a_control_exception_is_handed_back_untouched() -> None:
    """Ignore from the function is returned as a control outcome, not counted as a failure."""
    machine = machine_for(RetryPolicy())
    signal = Ignore()

    def call() -> None:
        raise signal

    outcome = run_chart(machine, None, Run(call=call))
    assert outcome.verdict is Verdict.CONTROL
    assert outcome.run.control is signal
    assert ERRORS_CONTEXT_KEY not in outcome.interpreter.context


def test_a_chart_that_stalls_is_a_configuration_error() -> None:
    """A non-final state with no timer after the attempt cannot become a Celery action."""
    chart = {
        "id": "stall",
        "initial": "attempting",
        "context": {"attempt": 0},
        "states": {
            "attempting": {"invoke": {"src": "work", "onDone": "done", "onError": "stuck"}},
            "stuck": {"on": {"NEVER": "done"}},
            "done": {"type": "final"},
            "dead": {"type": "final", "tags": ["dead-letter"]},
        },
    }
    machine = machine_for(RetryPolicy(), chart)

    def call() -> None:
        raise ConnectionError("x")

    with pytest.raises(ConfigurationError, match=r"settled in \['stall.stuck'\]"):
        run_chart(machine, None, Run(call=call))


def test_a_chart_changed_by_a_deploy_restarts_with_the_same_context() -> None:
    """A snapshot from the old chart: the new chart starts over keeping attempts and chain."""
    old = machine_for(RetryPolicy(max_attempts=3, base_ms=1, jitter="none"))
    calls: list[int] = []
    first = run_chart(old, None, Run(call=failing(5, calls)))
    snapshot = first.interpreter.get_snapshot()
    new_chart = load_task_chart(None)
    new_chart["states"]["retrying"]["description"] = "renamed in v2"
    new_chart["states"]["audit"] = {"type": "final"}
    new = machine_for(RetryPolicy(max_attempts=3, base_ms=1, jitter="none"), new_chart)
    assert new.structure_hash != old.structure_hash
    second = run_chart(new, header(new, snapshot), Run(call=failing(5, calls)))
    assert second.verdict is Verdict.RETRY
    assert second.interpreter.context["attempt"] == 2
    assert len(second.interpreter.context[ERRORS_CONTEXT_KEY]) == 2


def test_a_marker_store_that_fails_does_not_stop_the_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If the marker cannot be written, the attempt runs anyway and a warning says so."""
    machine = machine_for(RetryPolicy())

    def broken_mark(attempt: int) -> None:
        raise OSError("redis is restarting")

    with caplog.at_level(logging.WARNING, logger="xsm_celery.celery.task.machine"):
        outcome = run_chart(machine, None, Run(call=lambda: "ok", mark=broken_mark))
    assert outcome.verdict is Verdict.DONE
    assert "attempt marker" in caplog.text


def test_a_first_attempt_before_the_chart_decides_as_the_chart_does() -> None:
    """Success, failure and control flow come out the same with and without the shortcut."""
    from xsm_celery.celery.task.machine import first_attempt

    policy = RetryPolicy(max_attempts=3, base_ms=250, jitter="none")
    machine = machine_for(policy)
    first = first_attempt("t", machine, CONTROL_EXCEPTIONS, shipped=True)
    assert first is not None

    def ignored() -> None:
        raise Ignore()

    def fails() -> None:
        raise ConnectionError("down")

    for call in (lambda: "ok", ignored, fails):
        marks: list[int] = []
        runs = [Run(call=call, mark=marks.append), Run(call=call, mark=marks.append)]
        direct, charted = (
            run_chart(machine, None, runs[0], first=first),
            run_chart(machine, None, runs[1]),
        )
        assert direct.verdict is charted.verdict
        assert (runs[0].result, runs[0].invocations, marks) == (runs[1].result, 1, [1, 1])
        assert type(runs[0].control) is type(runs[1].control)
        if direct.verdict is Verdict.RETRY:
            assert direct.delay_ms == charted.delay_ms == 250
            assert direct.interpreter is not None
            assert charted.interpreter is not None
            assert direct.interpreter.context == charted.interpreter.context
            assert direct.interpreter.context[ERRORS_CONTEXT_KEY][0]["message"] == "down"
        else:
            assert direct.interpreter is None


def test_a_retry_before_the_chart_decides_as_the_chart_does() -> None:
    """From each header the chart writes, a direct retry ends as the restored chart would."""
    from xsm_celery.celery.task.machine import first_attempt

    policy = RetryPolicy(max_attempts=4, base_ms=100, factor=2.0, jitter="none")
    machine = machine_for(policy)
    first = first_attempt("t", machine, CONTROL_EXCEPTIONS, shipped=True, probe=machine)
    assert first is not None

    def fails() -> None:
        raise ConnectionError("still down")

    def ignored() -> None:
        raise Ignore()

    snapshot = None
    for spent in range(1, 4):
        snapshot = _retry_snapshot(machine, snapshot)
        assert first.number_for(header(machine, snapshot, max_attempts=4)) == spent + 1
        for call in (lambda: "ok", ignored, fails):
            marks: list[int] = []
            runs = [Run(call=call, mark=marks.append), Run(call=call, mark=marks.append)]
            direct = run_chart(machine, header(machine, snapshot, 4), runs[0], first=first)
            charted = run_chart(machine, header(machine, snapshot, 4), runs[1])
            assert direct.verdict is charted.verdict
            assert marks == [spent + 1, spent + 1]
            assert (runs[0].result, runs[0].invocations) == (runs[1].result, 1)
            if direct.verdict in (Verdict.RETRY, Verdict.GIVE_UP):
                assert direct.interpreter is not None
                assert charted.interpreter is not None
                assert direct.delay_ms == charted.delay_ms
                assert direct.interpreter.context == charted.interpreter.context
                assert direct.interpreter.context["attempt"] == spent + 1
            else:
                assert direct.interpreter is None


def test_a_retry_header_of_another_shape_runs_the_chart() -> None:
    """A header whose state or timers differ from what the chart wrote is not run directly."""
    import json

    from xsm_celery.celery.task.machine import first_attempt

    machine = machine_for(RetryPolicy(max_attempts=4, base_ms=100))
    first = first_attempt("t", machine, CONTROL_EXCEPTIONS, shipped=True, probe=machine)
    assert first is not None
    written = json.loads(_retry_snapshot(machine, None))
    assert first.number_for(header(machine, json.dumps(written), 4)) == 2
    no_timer = {**written, "deadlines": []}
    assert first.number_for(header(machine, json.dumps(no_timer), 4)) is None
    elsewhere = {**written, "value": "attempting", "state_ids": ["task.attempting"]}
    assert first.number_for(header(machine, json.dumps(elsewhere), 4)) is None
    blind = first_attempt("t", machine, CONTROL_EXCEPTIONS, shipped=True)
    assert blind is not None
    assert blind.number_for(header(machine, json.dumps(written), 4)) is None
    assert blind.number_for(None) == 1


def _retry_snapshot(machine: Any, snapshot: str | None) -> str:
    """The snapshot the chart writes after one more failure than ``snapshot`` holds."""

    def fails() -> None:
        raise ConnectionError("down")

    settled = run_chart(machine, header(machine, snapshot, 4), Run(call=fails))
    assert settled.verdict is Verdict.RETRY
    assert settled.interpreter is not None
    return str(settled.interpreter.get_snapshot())


def test_only_the_shipped_chart_runs_a_first_attempt_before_the_chart() -> None:
    """A custom chart may act on a success, so its first run always starts the chart."""
    from xsm_celery.celery.task.machine import first_attempt

    machine = machine_for(RetryPolicy(max_attempts=3))
    assert first_attempt("t", machine, CONTROL_EXCEPTIONS, shipped=False) is None
