"""The xsm_chart header is untrusted: each check, signing, and what a rejection reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from xsm_celery import hooks
from xsm_celery.celery.attempt import Run, Verdict, run_chart
from xsm_celery.celery.header import (
    HEADER,
    MAX_HEADER_CHARS,
    SIGNATURE_HEADER,
    HeaderCodec,
    signing_key,
)
from xsm_celery.celery.machine import build_task_machine
from xsm_celery.celery.task import CONTROL_EXCEPTIONS
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns import ERRORS_CONTEXT_KEY, RetryPolicy

POLICY = RetryPolicy(max_attempts=3, base_ms=5, jitter="none")
KEY = b"k" * 32


def _fail() -> None:
    raise ConnectionError("down")


@pytest.fixture(scope="module")
def machine() -> Any:
    """The default task chart bound to ``POLICY``."""
    return build_task_machine("shop.charge", None, POLICY, control=CONTROL_EXCEPTIONS)


@pytest.fixture
def rejected() -> Iterator[list[dict[str, object]]]:
    """Every HEADER_REJECTED fact emitted during the test."""
    seen: list[dict[str, object]] = []

    def record(fact: hooks.Fact) -> None:
        if fact.kind is hooks.FactKind.HEADER_REJECTED:
            seen.append(dict(fact.fields))

    stop = hooks.subscribe(record)
    yield seen
    stop()


def _after_one_failure(machine: Any) -> dict[str, Any]:
    """The snapshot a real first failure puts in the header, as a dict to tamper with."""
    settled = run_chart(machine, None, Run(call=_fail))
    assert settled.verdict is Verdict.RETRY
    return json.loads(settled.interpreter.get_snapshot())  # type: ignore[no-any-return]


def _codec(machine: Any, key: bytes | None = None) -> HeaderCodec:
    return HeaderCodec.for_task("shop.charge", machine, POLICY, key)


def test_a_genuine_header_passes_with_its_counter(machine: Any, rejected: list[Any]) -> None:
    """What the previous run wrote is accepted, with the attempts it spent."""
    data = _after_one_failure(machine)
    header = _codec(machine).decode({HEADER: json.dumps(data)})
    assert header is not None
    assert header.attempt == 1
    assert header.same_structure
    assert rejected == []


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda d: d["context"].__setitem__("attempt", -1_000_000), "attempt out of range"),
        (lambda d: d["context"].__setitem__("attempt", 99), "attempt out of range"),
        (lambda d: d["context"].__setitem__("attempt", "1"), "attempt not an integer"),
        (lambda d: d["context"].__setitem__("attempt", True), "attempt not an integer"),
        (
            lambda d: d["context"][ERRORS_CONTEXT_KEY].append(
                dict(d["context"][ERRORS_CONTEXT_KEY][0])
            ),
            "bad error chain",
        ),
        (
            lambda d: d["context"][ERRORS_CONTEXT_KEY][0].__setitem__("extra", "x"),
            "bad error chain",
        ),
        (lambda d: d["context"].__setitem__(ERRORS_CONTEXT_KEY, "forged"), "bad error chain"),
        (lambda d: d["context"].__setitem__("attempt_delay_ms", -5), "bad delay"),
        (
            lambda d: d["context"].__setitem__("_xsm_attempt_give_up", "ValueError"),
            "give-up mark in a waiting chart",
        ),
        (lambda d: d.__setitem__("machine_id", "other"), "another chart"),
        (lambda d: d.__setitem__("status", "done"), "not running"),
        (lambda d: d.__setitem__("context", []), "no context"),
    ],
)
def test_each_forgery_is_rejected_with_its_reason(
    machine: Any, rejected: list[dict[str, object]], tamper: Any, reason: str
) -> None:
    """A tampered header is ignored and reported once, naming the task and the reason."""
    data = _after_one_failure(machine)
    tamper(data)
    assert _codec(machine).decode({HEADER: json.dumps(data)}) is None
    assert rejected == [{"task": "shop.charge", "reason": reason}]


def test_unknown_context_keys_are_dropped_and_reported(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """An unsigned header's foreign keys never reach the run; its counter and chain are kept."""
    data = _after_one_failure(machine)
    data["context"]["is_admin"] = True
    header = _codec(machine).decode({HEADER: json.dumps(data)})
    assert header is not None
    assert "is_admin" not in header.snapshot["context"]
    assert header.attempt == 1
    assert len(header.snapshot["context"][ERRORS_CONTEXT_KEY]) == 1
    assert rejected == [{"task": "shop.charge", "reason": "unknown context key"}]


def test_a_signed_header_keeps_the_keys_its_chart_wrote(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """A key a custom action wrote survives when the header is signed: this worker wrote it."""
    data = _after_one_failure(machine)
    data["context"]["declines"] = 2
    codec = _codec(machine, KEY)
    header = codec.decode(codec.encode(json.dumps(data)))
    assert header is not None
    assert header.snapshot["context"]["declines"] == 2
    assert rejected == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [(123, "not a string"), ("{not json", "not JSON"), ("[1]", "not an object"),
     ("x" * (MAX_HEADER_CHARS + 1), "too large")],
)  # fmt: skip
def test_malformed_headers_are_rejected_before_parsing(
    machine: Any, rejected: list[dict[str, object]], value: Any, reason: str
) -> None:
    """A header that is not a bounded JSON object never reaches the snapshot restore."""
    assert _codec(machine).decode({HEADER: value}) is None
    assert [r["reason"] for r in rejected] == [reason]


def test_a_forged_counter_restarts_the_chart_with_the_full_budget(machine: Any) -> None:
    """attempt=-1000000 is ignored: the run is a first attempt, the task gives up after three."""
    data = _after_one_failure(machine)
    data["context"]["attempt"] = -1_000_000
    codec = _codec(machine)
    value: str | None = json.dumps(data)
    runs = 0
    while runs < 10:
        runs += 1
        settled = run_chart(machine, codec.decode({HEADER: value}), Run(call=_fail), codec.reject)
        if settled.verdict is not Verdict.RETRY:
            break
        value = settled.interpreter.get_snapshot()
    assert settled.verdict is Verdict.GIVE_UP
    assert runs == 3
    assert len(settled.interpreter.context[ERRORS_CONTEXT_KEY]) == 3


def test_a_header_in_a_final_state_cannot_skip_the_work(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """A header claiming the chart already finished is refused and the function runs."""
    data = _after_one_failure(machine)
    data["state_ids"], data["deadlines"] = ["task.done"], []
    codec = _codec(machine)
    calls: list[int] = []
    settled = run_chart(
        machine,
        codec.decode({HEADER: json.dumps(data)}),
        Run(call=lambda: calls.append(1)),
        codec.reject,
    )
    assert settled.verdict is Verdict.DONE
    assert calls == [1]
    assert [r["reason"] for r in rejected] == ["not waiting on a timer"]


def test_signed_headers_round_trip_and_unsigned_ones_are_rejected(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """With a key, the codec signs what it writes and refuses missing or wrong signatures."""
    codec = _codec(machine, KEY)
    headers = codec.encode(json.dumps(_after_one_failure(machine)))
    assert set(headers) == {HEADER, SIGNATURE_HEADER}
    assert codec.decode(headers) is not None
    assert codec.decode({HEADER: headers[HEADER]}) is None
    assert codec.decode({**headers, SIGNATURE_HEADER: "0" * 64}) is None
    other = _codec(machine, b"o" * 32).encode(headers[HEADER])
    assert codec.decode(other) is None
    assert [r["reason"] for r in rejected] == ["unsigned", "bad signature", "bad signature"]


def test_a_signed_header_changed_after_signing_is_rejected(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """Changing one character of a signed snapshot breaks its signature."""
    codec = _codec(machine, KEY)
    headers = codec.encode(json.dumps(_after_one_failure(machine)))
    forged = headers[HEADER].replace('"attempt": 1', '"attempt": 0')
    assert forged != headers[HEADER]
    assert codec.decode({**headers, HEADER: forged}) is None
    assert [r["reason"] for r in rejected] == ["bad signature"]


@pytest.mark.parametrize("raw", [b"short", 12345, "too short"])
def test_a_weak_or_mistyped_signing_key_is_refused(raw: Any) -> None:
    """The key must be a string or bytes of at least 32 bytes; the message says how to make one."""
    with pytest.raises(ConfigurationError, match=r"secrets\.token_hex"):
        signing_key({"xsm_signing_key": raw})


def test_no_signing_key_means_none() -> None:
    """Unset or empty leaves signing off; a string key is used as its UTF-8 bytes."""
    assert signing_key({}) is None
    assert signing_key({"xsm_signing_key": ""}) is None
    assert signing_key({"xsm_signing_key": "s" * 32}) == b"s" * 32
