"""DeadLetterPlugin: what a record holds, redaction, options and the error chain's life."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.patterns.charts import cycling_chart, retry_chart
from xsm_celery.engine import (
    MachineLogic,
    PluginBase,
    SimulatedClock,
    SyncInterpreter,
    create_machine,
)
from xsm_celery.patterns import (
    ERRORS_CONTEXT_KEY,
    DeadLetter,
    DeadLetterPlugin,
    DeadLetterStore,
    RetryPolicy,
)
from xsm_celery.patterns.error_chain import MAX_ERROR_MESSAGE


def always_fail(message: str = "upstream 503") -> Any:
    def work(interp: Any, ctx: dict[str, Any], event: Any) -> None:
        raise ConnectionError(f"{message} (attempt {ctx['attempt'] + 1})")

    return work


def run_to_dead_letter(
    plugin: DeadLetterPlugin,
    work: Any = None,
    *,
    max_attempts: int = 3,
    chart: dict[str, Any] | None = None,
    **context: Any,
) -> SyncInterpreter:
    policy = RetryPolicy(max_attempts=max_attempts, base_ms=100, jitter="none")
    logic = policy.logic().merge(MachineLogic(services={"work": work or always_fail()}))
    clock = SimulatedClock()
    machine = create_machine(chart or retry_chart(**context), logic=logic)
    interp = SyncInterpreter(machine, clock=clock).use(plugin).start()
    for _ in range(max_attempts + 1):
        clock.increment(10_000)
    return interp


def test_seed_record() -> None:
    """One record: attempts=3, three errors oldest first, secret redacted, JSON round trip."""
    store = DeadLetterStore()
    interp = run_to_dead_letter(DeadLetterPlugin(store), api_key="sk-live-secret")
    assert interp.matches("job.deadLettered")
    [record] = store.all()
    assert record.attempts == 3
    assert [e["message"] for e in record.errors] == [
        "upstream 503 (attempt 1)",
        "upstream 503 (attempt 2)",
        "upstream 503 (attempt 3)",
    ]
    assert record.errors[0] == {
        "source": "service",
        "name": "work",
        "type": "ConnectionError",
        "message": "upstream 503 (attempt 1)",
    }
    assert record.snapshot["context"]["api_key"] == "***"
    assert ERRORS_CONTEXT_KEY not in record.snapshot["context"]
    assert (record.machine_id, record.state_id, record.reason) == (
        "job",
        "job.deadLettered",
        "dead_letter_state",
    )
    assert record.machine_hash == interp.machine.structure_hash
    assert DeadLetter.from_json(record.to_json()) == record
    assert "sk-live-secret" not in record.to_json()


def test_record_event_and_time() -> None:
    """The record names the event being handled and takes its time from wall_now()."""
    store = DeadLetterStore()
    interp = run_to_dead_letter(DeadLetterPlugin(store))
    [record] = store.all()
    assert isinstance(record.event["type"], str)
    assert record.event["payload"] == {}
    assert abs(record.taken_at - interp.wall_now()) < 60


def test_chain_is_cleared_after_capture() -> None:
    """Once the record is written the context no longer holds the chain."""
    store = DeadLetterStore()
    interp = run_to_dead_letter(DeadLetterPlugin(store))
    assert ERRORS_CONTEXT_KEY not in interp.context


def test_errors_are_strings_never_exceptions() -> None:
    """Each chain entry is four strings, including for a failing action."""
    store = DeadLetterStore()
    chart = retry_chart()
    chart["states"]["retrying"]["entry"] = "audit"

    def audit(interp: Any, ctx: Any, event: Any, action: Any) -> None:
        raise LookupError("audit table missing")

    policy = RetryPolicy(max_attempts=2, base_ms=100, jitter="none")
    logic = policy.logic().merge(
        MachineLogic(services={"work": always_fail()}, actions={"audit": audit})
    )
    clock = SimulatedClock()
    interp = (
        SyncInterpreter(create_machine(chart, logic=logic), clock=clock)
        .use(DeadLetterPlugin(store))
        .start()
    )  # keep a reference: the clock holds it weakly
    clock.increment(10_000)
    clock.increment(10_000)
    assert interp.matches("job.deadLettered")
    [record] = store.all()
    sources = [(e["source"], e["name"], e["type"]) for e in record.errors]
    assert ("action", "audit", "LookupError") in sources
    assert ("service", "work", "ConnectionError") in sources
    assert all(isinstance(v, str) for e in record.errors for v in e.values())


def test_messages_are_cut_and_secrets_masked() -> None:
    """Messages are at most 1,000 characters and secret context values in them are masked."""

    def work(interp: Any, ctx: dict[str, Any], event: Any) -> None:
        raise RuntimeError(f"token {ctx['password']} rejected " + "x" * 5_000)

    store = DeadLetterStore()
    run_to_dead_letter(
        DeadLetterPlugin(store), work, max_attempts=1, password="hunter2-very-secret"
    )
    [record] = store.all()
    message = record.errors[0]["message"]
    assert len(message) <= MAX_ERROR_MESSAGE
    assert message.startswith("token *** rejected")
    assert "hunter2" not in record.to_json()


def test_event_payload_is_redacted() -> None:
    """Secret keys in the triggering event's payload are masked in the record."""
    chart = {
        "id": "m",
        "initial": "idle",
        "states": {"idle": {"on": {"FAIL": "dead"}}, "dead": {"tags": ["dead-letter"]}},
    }
    store = DeadLetterStore()
    interp = SyncInterpreter(create_machine(chart)).use(DeadLetterPlugin(store)).start()
    interp.send("FAIL", token="abc123", order=7)
    [record] = store.all()
    assert record.event == {"type": "FAIL", "payload": {"token": "***", "order": 7}}
    assert record.attempts is None


def test_custom_redact_keys() -> None:
    """redact_keys= replaces the denylist."""
    store = DeadLetterStore()
    run_to_dead_letter(
        DeadLetterPlugin(store, redact_keys=("customer",)), customer="Ada", api_key="visible"
    )
    [record] = store.all()
    assert record.snapshot["context"]["customer"] == "***"
    assert record.snapshot["context"]["api_key"] == "visible"


def test_include_snapshot_false() -> None:
    """include_snapshot=False writes an empty snapshot."""
    store = DeadLetterStore()
    run_to_dead_letter(DeadLetterPlugin(store, include_snapshot=False))
    assert store.all()[0].snapshot == {}


def test_explicit_state_ids() -> None:
    """state_ids names the dead-letter states instead of the tag."""
    chart = retry_chart()
    chart["states"]["deadLettered"]["tags"] = []
    store, tagged = DeadLetterStore(), DeadLetterStore()
    run_to_dead_letter(DeadLetterPlugin(store, state_ids=["job.deadLettered"]), chart=chart)
    run_to_dead_letter(DeadLetterPlugin(tagged), chart=chart)
    assert len(store.all()) == 1
    assert tagged.all() == []


def test_state_ids_must_not_be_a_string() -> None:
    """A single string for state_ids is refused (it would be read letter by letter)."""
    with pytest.raises(TypeError, match="state_ids"):
        DeadLetterPlugin(DeadLetterStore(), state_ids="job.deadLettered")


def test_custom_attempt_key() -> None:
    """attempt_key= reads another counter."""
    chart = retry_chart(tries=7)
    store = DeadLetterStore()
    run_to_dead_letter(DeadLetterPlugin(store, attempt_key="tries"), chart=chart)
    assert store.all()[0].attempts == 7


def test_max_errors_keeps_the_newest() -> None:
    """max_errors caps the chain, dropping the oldest entries."""
    store = DeadLetterStore()
    run_to_dead_letter(DeadLetterPlugin(store, max_errors=2), max_attempts=5)
    assert [e["message"] for e in store.all()[0].errors] == [
        "upstream 503 (attempt 4)",
        "upstream 503 (attempt 5)",
    ]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_errors_must_be_positive(bad: Any) -> None:
    """max_errors below 1 is refused."""
    with pytest.raises(ValueError, match="max_errors"):
        DeadLetterPlugin(DeadLetterStore(), max_errors=bad)


def test_sink_with_put_only() -> None:
    """An object with put() is a sink too."""

    class Queue:
        def __init__(self) -> None:
            self.items: list[DeadLetter] = []

        def put(self, record: DeadLetter) -> None:
            self.items.append(record)

    queue = Queue()
    run_to_dead_letter(DeadLetterPlugin(queue))
    assert len(queue.items) == 1


def test_plain_function_sink() -> None:
    """Any callable(DeadLetter) is a sink."""
    seen: list[DeadLetter] = []
    run_to_dead_letter(DeadLetterPlugin(seen.append))
    assert len(seen) == 1


def test_sink_neither_callable_nor_put_is_refused_at_construction() -> None:
    """TypeError at construction, not at the first dead letter."""
    with pytest.raises(TypeError, match="put"):
        DeadLetterPlugin(object())
    with pytest.raises(TypeError):
        DeadLetterPlugin(type("Weird", (), {"put": 3})())


def test_raising_sink_is_logged_reraised_and_harmless(caplog: pytest.LogCaptureFixture) -> None:
    """A raising sink: ERROR log with the record id, on_plugin_error fires, the machine carries on."""
    reported: list[tuple[str, BaseException]] = []
    records: list[DeadLetter] = []

    class Watcher(PluginBase):
        def on_plugin_error(
            self, interpreter: Any, plugin: Any, hook: str, error: BaseException
        ) -> None:
            reported.append((hook, error))

    def sink(record: DeadLetter) -> None:
        records.append(record)
        raise OSError("queue unreachable")

    caplog.set_level(logging.ERROR)
    chart = cycling_chart()
    policy = RetryPolicy(max_attempts=1, base_ms=10, jitter="none")
    logic = policy.logic().merge(MachineLogic(services={"work": always_fail()}))
    clock = SimulatedClock()
    interp = (
        SyncInterpreter(create_machine(chart, logic=logic), clock=clock)
        .use(Watcher())
        .use(DeadLetterPlugin(sink))
        .start()
    )
    clock.increment(1_000)
    assert interp.matches("job.deadLettered")
    assert interp.status == "running"
    [record] = records
    assert record.id in caplog.text
    assert any(r.levelno == logging.ERROR for r in caplog.records)
    assert [(hook, type(err)) for hook, err in reported] == [("on_event_processed", OSError)]
    interp.send("AGAIN")
    clock.increment(1_000)
    assert len(records) == 2


def test_recovery_then_new_failure_starts_a_fresh_chain() -> None:
    """Dead-letter, recover, fail again: the second record holds only the new episode's errors.

    Leaving the dead-letter state does not reset the counter; the success in between does
    (retryReset), so the second episode again has two attempts.
    """
    store = DeadLetterStore()
    chart = cycling_chart()
    outcomes = iter(
        [
            ConnectionError("a1"),
            ConnectionError("a2"),
            None,
            ConnectionError("b1"),
            ConnectionError("b2"),
        ]
    )

    def work(interp: Any, ctx: Any, event: Any) -> str:
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome
        return "ok"

    policy = RetryPolicy(max_attempts=2, base_ms=10, jitter="none")
    logic = policy.logic().merge(MachineLogic(services={"work": work}))
    clock = SimulatedClock()
    interp = (
        SyncInterpreter(create_machine(chart, logic=logic), clock=clock)
        .use(DeadLetterPlugin(store))
        .start()
    )
    clock.increment(1_000)
    assert interp.matches("job.deadLettered")
    interp.send("AGAIN")  # attempt counter still 2: only retryReset zeroes it
    assert interp.matches("job.done")
    interp.send("AGAIN")
    clock.increment(1_000)
    first, second = store.all()
    assert [e["message"] for e in first.errors] == ["a1", "a2"]
    assert [e["message"] for e in second.errors] == ["b1", "b2"]
    assert second.attempts == 2


def test_clean_service_done_clears_the_chain() -> None:
    """A service finishing cleanly ends the chain even without retryReset."""
    chart = retry_chart()
    chart["states"]["attempting"]["invoke"]["onDone"] = {"target": "done"}
    chart["states"]["done"] = {"on": {"AGAIN": "attempting"}}
    outcomes = iter([ConnectionError("x"), None])

    def work(interp: Any, ctx: Any, event: Any) -> str:
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome
        return "ok"

    logic = (
        RetryPolicy(max_attempts=3, base_ms=10, jitter="none")
        .logic()
        .merge(MachineLogic(services={"work": work}))
    )
    clock = SimulatedClock()
    interp = (
        SyncInterpreter(create_machine(chart, logic=logic), clock=clock)
        .use(DeadLetterPlugin(DeadLetterStore()))
        .start()
    )
    assert len(interp.context[ERRORS_CONTEXT_KEY]) == 1
    clock.increment(10)
    assert interp.matches("job.done")
    assert ERRORS_CONTEXT_KEY not in interp.context


def test_non_retryable_reason() -> None:
    """A give_up_on error dead-letters with reason non_retryable."""

    def work(interp: Any, ctx: Any, event: Any) -> None:
        raise PermissionError("forbidden")

    store = DeadLetterStore()
    policy = RetryPolicy(max_attempts=5, base_ms=10, jitter="none", give_up_on=PermissionError)
    logic = policy.logic().merge(MachineLogic(services={"work": work}))
    clock = SimulatedClock()
    interp = (
        SyncInterpreter(create_machine(retry_chart(), logic=logic), clock=clock)
        .use(DeadLetterPlugin(store))
        .start()
    )  # keep a reference: the clock holds it weakly
    clock.increment(0)
    assert interp.matches("job.deadLettered")
    [record] = store.all()
    assert record.reason == "non_retryable"
    assert record.attempts == 1


def test_counter_not_reset_between_episodes_gives_short_chain() -> None:
    """Leaving the dead-letter state without a success keeps the counter: attempts=3 with one error."""
    store = DeadLetterStore()
    policy = RetryPolicy(max_attempts=2, base_ms=10, jitter="none")
    logic = policy.logic().merge(MachineLogic(services={"work": always_fail()}))
    clock = SimulatedClock()
    interp = (
        SyncInterpreter(create_machine(cycling_chart(), logic=logic), clock=clock)
        .use(DeadLetterPlugin(store))
        .start()
    )
    clock.increment(1_000)
    interp.send("AGAIN")
    clock.increment(1_000)
    first, second = store.all()
    assert (first.attempts, len(first.errors)) == (2, 2)
    assert (second.attempts, len(second.errors)) == (3, 1)
