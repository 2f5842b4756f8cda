"""SagaBuilder: the generated chart's behaviour on a SyncInterpreter (seed 003, "Sagas")."""

from __future__ import annotations

import json
from typing import Any

from tests.patterns.sagas import Calls, hang, run_saga
from xsm_celery.engine import create_machine
from xsm_celery.hooks import FactKind, subscribe
from xsm_celery.patterns import (
    DeadLetterPlugin,
    MemoryDeadLetterStore,
    RetryPolicy,
    SagaBuilder,
    SagaStep,
)


def three_steps(**reserve: Any) -> SagaBuilder:
    return (
        SagaBuilder("fulfil")
        .step("reserve", invoke="reserveStock", compensate="releaseStock", **reserve)
        .step("charge", invoke="chargeCard", compensate="refundCard")
        .step("ship", invoke="ship")
    )


def services(calls: Calls, **fail: Any) -> dict[str, Any]:
    names = {
        "reserveStock": "reserve",
        "releaseStock": "release",
        "chargeCard": "charge",
        "refundCard": "refund",
        "ship": "ship",
    }
    return {key: calls.service(name, fail.get(name, False)) for key, name in names.items()}


def test_success_runs_every_step_once_and_completes() -> None:
    """All steps succeed: each runs once in order, results are kept, nothing is compensated."""
    calls = Calls()
    interp, _ = run_saga(three_steps(), services(calls))
    assert interp.current_state_ids == {"fulfil.completed"}
    assert calls.order == ["reserve", "charge", "ship"]
    assert interp.context["results"] == {
        "reserve": "reserve-ok",
        "charge": "charge-ok",
        "ship": "ship-ok",
    }
    assert interp.context["compensated"] == []
    assert interp.context["error"] is None


def test_failure_at_the_last_step_compensates_in_reverse() -> None:
    """The seed's run: ship fails, refund then release run once each, the saga ends failed."""
    calls = Calls()
    interp, _ = run_saga(three_steps(), services(calls, ship=True))
    assert interp.current_state_ids == {"fulfil.failed"}
    assert calls.order == ["reserve", "charge", "ship", "refund", "release"]
    assert interp.context["compensated"] == ["charge", "reserve"]
    assert interp.context["error"]["step"] == "ship"
    assert interp.context["error"]["stage"] == "step"
    assert interp.context["error"]["type"] == "RuntimeError"


def test_failure_at_the_first_step_compensates_nothing() -> None:
    """A first step that fails (without retry) goes straight to failed."""
    calls = Calls()
    interp, _ = run_saga(three_steps(), services(calls, reserve=True))
    assert interp.current_state_ids == {"fulfil.failed"}
    assert calls.order == ["reserve"]
    assert interp.context["compensated"] == []


def test_a_step_without_compensation_is_skipped_on_the_way_back() -> None:
    """Compensation walks back over steps that declare none, to the nearest that does."""
    saga = (
        SagaBuilder("trip")
        .step("flight", invoke="bookFlight", compensate="cancelFlight")
        .step("note", invoke="writeNote")
        .step("hotel", invoke="bookHotel")
    )
    calls = Calls()
    interp, _ = run_saga(
        saga,
        {
            "bookFlight": calls.service("flight"),
            "cancelFlight": calls.service("cancel"),
            "writeNote": calls.service("note"),
            "bookHotel": calls.service("hotel", fail=True),
        },
    )
    assert interp.current_state_ids == {"trip.failed"}
    assert calls.order == ["flight", "note", "hotel", "cancel"]
    assert interp.context["compensated"] == ["flight"]


def test_on_failure_runs_when_the_saga_fails_and_not_when_it_completes() -> None:
    """on_failure actions run on entering failed, never on a completed saga."""
    notified: list[str] = []
    notify = {"notifyOps": lambda i, ctx, e, a: notified.append(ctx["error"]["step"])}
    calls = Calls()
    run_saga(three_steps().on_failure("notifyOps"), services(calls), actions=notify)
    assert notified == []
    run_saga(three_steps().on_failure("notifyOps"), services(calls, charge=True), actions=notify)
    assert notified == ["charge"]


def test_a_failing_compensation_ends_in_compensation_failed_with_a_dead_letter() -> None:
    """A compensation that raises parks the saga in final compensationFailed; one dead letter."""
    calls = Calls()
    store = MemoryDeadLetterStore()
    interp, _ = run_saga(
        three_steps(),
        services(calls, ship=True, refund=True),
        plugins=[DeadLetterPlugin(store)],
    )
    assert interp.current_state_ids == {"fulfil.compensationFailed"}
    assert interp.status == "done"
    assert calls.order == ["reserve", "charge", "ship", "refund"]
    assert interp.context["compensated"] == []
    assert interp.context["error"]["stage"] == "compensation"
    assert interp.context["error"]["step"] == "charge"
    [letter] = store.list()
    assert letter.state_id == "fulfil.compensationFailed"
    assert [e["message"] for e in letter.errors] == [
        "ship failed (call 1)",
        "refund failed (call 1)",
    ]


def test_retry_reruns_the_step_after_the_policy_delay() -> None:
    """A retry= step fails into <step>Retrying, waits the delay, and succeeds on attempt 3."""
    calls = Calls()
    policy = RetryPolicy(max_attempts=3, base_ms=100, factor=2, jitter="none")
    interp, clock = run_saga(three_steps(retry=policy), services(calls, reserve=2))
    assert interp.current_state_ids == {"fulfil.steps.reserveRetrying"}
    clock.increment(99)
    assert calls.order == ["reserve"]
    clock.increment(1)
    assert calls.order == ["reserve", "reserve"]
    clock.increment(199)
    assert interp.matches("steps.reserveRetrying")
    clock.increment(1)
    assert interp.current_state_ids == {"fulfil.completed"}
    assert interp.context["attempt_reserve"] == 3
    assert interp.context["attempt_charge"] == 1


def test_retry_gives_up_after_max_attempts_then_compensates() -> None:
    """When retries run out the step fails for good and earlier steps are compensated."""
    calls = Calls()
    policy = RetryPolicy(max_attempts=2, base_ms=10, jitter="none")
    saga = (
        SagaBuilder("fulfil")
        .step("reserve", invoke="reserveStock", compensate="releaseStock")
        .step("charge", invoke="chargeCard", retry=policy)
    )
    interp, clock = run_saga(
        saga,
        {
            "reserveStock": calls.service("reserve"),
            "releaseStock": calls.service("release"),
            "chargeCard": calls.service("charge", fail=True),
        },
    )
    clock.increment(1_000)
    assert interp.current_state_ids == {"fulfil.failed"}
    assert calls.order == ["reserve", "charge", "charge", "release"]
    assert interp.context["attempt_charge"] == 2


def test_a_non_retryable_error_is_not_retried() -> None:
    """An error the policy gives up on fails the step at once, whatever attempts remain."""
    calls = Calls()

    def declined(interp: Any, ctx: dict[str, Any], event: Any) -> None:
        calls.order.append("charge")
        raise PermissionError("card declined")

    policy = RetryPolicy(max_attempts=5, base_ms=10, give_up_on=PermissionError)
    saga = SagaBuilder("pay").step("charge", invoke="chargeCard", retry=policy)
    interp, clock = run_saga(saga, {"chargeCard": declined})
    clock.increment(10_000)
    assert interp.current_state_ids == {"pay.failed"}
    assert calls.order == ["charge"]


def test_timeout_fails_the_step_and_compensates() -> None:
    """A step whose service never answers fails after timeout_ms, then compensation runs."""
    calls = Calls()
    saga = (
        SagaBuilder("fulfil")
        .step("reserve", invoke="reserveStock", compensate="releaseStock")
        .step("charge", invoke="chargeCard", timeout_ms=5000)
    )
    interp, clock = run_saga(
        saga,
        {
            "reserveStock": calls.service("reserve"),
            "releaseStock": calls.service("release"),
            "chargeCard": hang("charge", calls),
        },
    )
    clock.increment(4999)
    assert interp.matches("steps.charge")
    clock.increment(1)
    assert interp.current_state_ids == {"fulfil.failed"}
    assert calls.order == ["reserve", "charge", "release"]
    assert interp.context["error"]["type"] == "TimeoutError"
    assert interp.context["error"]["step"] == "charge"


def test_timeout_counts_as_a_failed_attempt_under_retry() -> None:
    """With retry=, a timeout is an attempt: the step is re-run until attempts run out."""
    calls = Calls()
    policy = RetryPolicy(max_attempts=3, base_ms=100, jitter="none")
    saga = SagaBuilder("slow").step("call", invoke="callApi", timeout_ms=1000, retry=policy)
    interp, clock = run_saga(saga, {"callApi": hang("call", calls)})
    for _ in range(10):
        clock.increment(1000)
    assert interp.current_state_ids == {"slow.failed"}
    assert calls.order == ["call", "call", "call"]
    assert interp.context["attempt_call"] == 3


def test_start_event_waits_and_copies_its_payload_into_input() -> None:
    """With start_event the saga idles until START; START's payload is context['input']."""
    seen: list[Any] = []

    def reserve(interp: Any, ctx: dict[str, Any], event: Any) -> str:
        seen.append((event.type, ctx["input"]))
        return "held"

    saga = SagaBuilder("fulfil", start_event="START").step("reserve", invoke="reserveStock")
    interp, _ = run_saga(saga, {"reserveStock": reserve})
    assert interp.current_state_ids == {"fulfil.idle"}
    assert interp.context["input"] is None
    interp.send("START", order_id="o-42", total=99)
    assert seen == [("invoke.reserve", {"order_id": "o-42", "total": 99})]
    assert interp.current_state_ids == {"fulfil.completed"}


def test_input_is_none_for_a_saga_that_starts_immediately() -> None:
    """context['input'] exists in both shapes and is None without a start event."""
    calls = Calls()
    interp, _ = run_saga(three_steps(), services(calls))
    assert "input" in interp.context
    assert interp.context["input"] is None


def test_steps_returns_the_declared_steps() -> None:
    """SagaBuilder.steps is the frozen SagaStep records, in order."""
    policy = RetryPolicy(max_attempts=2)
    saga = three_steps(timeout_ms=5000, retry=policy)
    assert saga.steps[0] == SagaStep("reserve", "reserveStock", "releaseStock", 5000, policy)
    assert [s.name for s in saga.steps] == ["reserve", "charge", "ship"]
    assert saga.steps[2].compensate is None


def test_build_is_json_and_strict_config_clean() -> None:
    """build() is a plain JSON dict that strict_config accepts, and each call is a fresh copy."""
    saga = three_steps(timeout_ms=5000, retry=RetryPolicy(max_attempts=3)).on_failure("notify")
    config = saga.build()
    assert json.loads(json.dumps(config)) == config
    machine = create_machine(config, strict_config=True)
    assert machine.id == "fulfil"
    config["states"].clear()
    assert saga.build()["states"]


def test_generated_shape_matches_the_seed() -> None:
    """steps.<name>, steps.<name>Retrying, compensating.<name>, completed/failed/compensationFailed."""
    config = three_steps(timeout_ms=5000, retry=RetryPolicy(max_attempts=3)).build()
    states = config["states"]
    assert set(states) == {"steps", "compensating", "completed", "failed", "compensationFailed"}
    assert set(states["steps"]["states"]) == {"reserve", "reserveRetrying", "charge", "ship"}
    assert set(states["compensating"]["states"]) == {"reserve", "charge"}
    assert states["compensationFailed"] == {"type": "final", "tags": ["dead-letter"]}
    reserve = states["steps"]["states"]["reserve"]
    assert reserve["invoke"]["id"] == "reserve"
    assert reserve["invoke"]["src"] == "reserveStock"
    assert "5000" in reserve["after"]


def test_every_step_transition_publishes_its_integration_event() -> None:
    """meta.publish names <saga>.<step>.completed / .failed / .compensated on the transitions."""
    from xsm_celery.eda import publish_specs

    saga = three_steps()
    machine = create_machine(saga.build())
    types = {spec.type for spec in publish_specs(machine)}
    for step in ("reserve", "charge", "ship"):
        assert {f"fulfil.{step}.completed", f"fulfil.{step}.failed"} <= types
    assert {"fulfil.reserve.compensated", "fulfil.charge.compensated"} <= types
    assert "fulfil.ship.compensated" not in types


def test_each_outcome_is_reported_on_the_fact_stream() -> None:
    """Step outcomes are SAGA_STEP facts with saga, step and outcome fields only."""
    facts: list[dict[str, object]] = []
    stop = subscribe(
        lambda f: facts.append(dict(f.fields)) if f.kind is FactKind.SAGA_STEP else None
    )
    try:
        run_saga(three_steps(), services(Calls(), ship=True))
    finally:
        stop()
    assert [(f["step"], f["outcome"]) for f in facts] == [
        ("reserve", "completed"),
        ("charge", "completed"),
        ("ship", "failed"),
        ("charge", "compensated"),
        ("reserve", "compensated"),
    ]
    assert all(set(f) == {"saga", "step", "outcome"} for f in facts)


def test_a_timeout_is_in_the_dead_letter_error_chain() -> None:
    """A step that timed out, then an undo that failed: the dead letter lists both, in order."""
    calls = Calls()
    store = MemoryDeadLetterStore()
    saga = (
        SagaBuilder("fulfil")
        .step("reserve", invoke="reserveStock", compensate="releaseStock")
        .step("charge", invoke="chargeCard", timeout_ms=1000)
    )
    interp, clock = run_saga(
        saga,
        {
            "reserveStock": calls.service("reserve"),
            "releaseStock": calls.service("release", fail=True),
            "chargeCard": hang("charge", calls),
        },
        plugins=[DeadLetterPlugin(store)],
    )
    clock.increment(1000)
    assert interp.current_state_ids == {"fulfil.compensationFailed"}
    [letter] = store.list()
    assert [e["type"] for e in letter.errors] == ["TimeoutError", "RuntimeError"]
    assert "'charge' timed out" in letter.errors[0]["message"]


def test_secrets_from_the_input_are_masked_in_context_error() -> None:
    """An error message quoting a secret from context is stored with the secret masked."""

    def charge(interp: Any, ctx: dict[str, Any], event: Any) -> None:
        raise RuntimeError(f"card {ctx['input']['card_token']} declined")

    saga = SagaBuilder("pay", start_event="START").step("charge", invoke="chargeCard")
    interp, _ = run_saga(saga, {"chargeCard": charge})
    interp.send("START", card_token="tok_live_4242")
    assert interp.context["error"]["message"] == "card *** declined"
    assert "tok_live_4242" not in json.dumps(interp.context["error"])
