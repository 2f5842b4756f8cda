"""Property tests: compensations run in exactly the reverse order of completed steps, once each."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.patterns.sagas import Calls, run_saga
from xsm_celery.patterns import RetryPolicy, SagaBuilder


@st.composite
def sagas(draw: st.DrawFn) -> dict[str, Any]:
    """A saga of 1-7 steps, some compensable, a failing step (or none), a failing undo or none."""
    count = draw(st.integers(min_value=1, max_value=7))
    compensable = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    failing = draw(st.none() | st.integers(min_value=0, max_value=count - 1))
    broken_undo = draw(st.none() | st.integers(min_value=0, max_value=count - 1))
    return {"compensable": compensable, "failing": failing, "broken_undo": broken_undo}


def build(case: dict[str, Any], calls: Calls) -> tuple[SagaBuilder, dict[str, Any]]:
    saga = SagaBuilder("prop")
    services: dict[str, Any] = {}
    for index, has_undo in enumerate(case["compensable"]):
        name = f"s{index}"
        saga.step(name, invoke=f"do_{name}", compensate=f"undo_{name}" if has_undo else None)
        services[f"do_{name}"] = calls.service(f"do:{name}", fail=index == case["failing"])
        if has_undo:
            broken = index == case["broken_undo"]
            services[f"undo_{name}"] = calls.service(f"undo:{name}", fail=broken)
    return saga, services


@settings(max_examples=150, deadline=None)
@given(sagas())
def test_compensation_is_the_exact_reverse_of_completed_steps(case: dict[str, Any]) -> None:
    """Steps run in order up to the failure, then completed steps' undos in reverse, once each."""
    calls = Calls()
    saga, services = build(case, calls)
    interp, _ = run_saga(saga, services)
    count, failing = len(case["compensable"]), case["failing"]
    ran = list(range(count if failing is None else failing + 1))
    assert calls.order[: len(ran)] == [f"do:s{i}" for i in ran]
    undos = calls.order[len(ran) :]
    if failing is None:
        assert undos == []
        assert interp.current_state_ids == {"prop.completed"}
        return
    expected = [f"undo:s{i}" for i in reversed(range(failing)) if case["compensable"][i]]
    broken = case["broken_undo"]
    if broken is not None and f"undo:s{broken}" in expected:
        expected = expected[: expected.index(f"undo:s{broken}") + 1]
        assert interp.current_state_ids == {"prop.compensationFailed"}
    else:
        assert interp.current_state_ids == {"prop.failed"}
    assert undos == expected
    assert len(set(undos)) == len(undos)
    succeeded = [
        u.split(":")[1] for u in undos if not (broken is not None and u == f"undo:s{broken}")
    ]
    assert interp.context["compensated"] == succeeded
    assert interp.status == "done"


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=4),
    st.integers(min_value=1, max_value=4),
)
def test_a_retried_step_runs_at_most_max_attempts(failures: list[int], max_attempts: int) -> None:
    """Each retry= step runs min(failures + 1, max_attempts) times; the saga completes iff all fit."""
    calls = Calls()
    policy = RetryPolicy(max_attempts=max_attempts, base_ms=10, jitter="none")
    saga = SagaBuilder("retry")
    services: dict[str, Any] = {}
    for index, count in enumerate(failures):
        saga.step(f"s{index}", invoke=f"do{index}", compensate=f"undo{index}", retry=policy)
        services[f"do{index}"] = calls.service(f"do:s{index}", fail=count)
        services[f"undo{index}"] = calls.service(f"undo:s{index}")
    interp, clock = run_saga(saga, services)
    for _ in range(len(failures) * max_attempts + 1):
        clock.increment(10_000)
    ran = [c for c in calls.order if c.startswith("do:")]
    first_giving_up = next((i for i, n in enumerate(failures) if n >= max_attempts), None)
    for index, count in enumerate(failures):
        expected = (
            0
            if first_giving_up is not None and index > first_giving_up
            else min(count + 1, max_attempts)
        )
        assert ran.count(f"do:s{index}") == expected
    if first_giving_up is None:
        assert interp.current_state_ids == {"retry.completed"}
    else:
        assert interp.current_state_ids == {"retry.failed"}
        undone = [c for c in calls.order if c.startswith("undo:")]
        assert undone == [f"undo:s{i}" for i in reversed(range(first_giving_up))]
