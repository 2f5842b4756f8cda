"""The xsm_chart header is untrusted: each check, signing, task ids, what a rejection reports."""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery, signals

from xsm_celery import hooks
from xsm_celery.celery import ChartTask
from xsm_celery.celery.task import header as header_module
from xsm_celery.celery.task.attempt import Run, Verdict, run_chart
from xsm_celery.celery.task.chart_task import (
    CONTROL_EXCEPTIONS,
    _warn_unsigned_headers,
    warn_if_unsigned,
)
from xsm_celery.celery.task.header import (
    HEADER,
    MAX_HEADER_CHARS,
    SIGNATURE_HEADER,
    TASK_HEADER,
    UNSIGNED_WARNING,
    ChartHeader,
    HeaderCodec,
    signing_key,
)
from xsm_celery.celery.task.machine import build_task_machine
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns import ERRORS_CONTEXT_KEY, RetryPolicy

POLICY = RetryPolicy(max_attempts=3, base_ms=5, jitter="none")
KEY = b"k" * 32
#: The id of the task whose messages the tests decode.
TASK_ID = "task-1"
ROOT = Path(__file__).resolve().parents[2]


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


def _headers(value: Any, task_id: str = TASK_ID) -> dict[str, Any]:
    """Unsigned headers carrying ``value`` (a dict is JSON-encoded), written for ``task_id``."""
    text = json.dumps(value) if isinstance(value, dict) else value
    return {HEADER: text, TASK_HEADER: task_id}


def test_a_genuine_header_passes_with_its_counter(machine: Any, rejected: list[Any]) -> None:
    """What the previous run wrote is accepted, with the attempts it spent."""
    data = _after_one_failure(machine)
    header = _codec(machine).decode(_headers(data), TASK_ID)
    assert header is not None
    assert header.attempt == 1
    assert header.same_structure
    assert rejected == []


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda d: d["context"].__setitem__("attempt", -1_000_000), "attempt out of range"),
        (lambda d: d["context"].__setitem__("attempt", 99), "attempt out of range"),
        (lambda d: d["context"].__setitem__("attempt", 3), "attempt out of range"),
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
    assert _codec(machine).decode(_headers(data), TASK_ID) is None
    assert rejected == [{"task": "shop.charge", "reason": reason}]


def test_unknown_context_keys_are_dropped_and_reported(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """An unsigned header's foreign keys never reach the run; its counter and chain are kept."""
    data = _after_one_failure(machine)
    data["context"]["is_admin"] = True
    header = _codec(machine).decode(_headers(data), TASK_ID)
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
    header = codec.decode(codec.encode(json.dumps(data), TASK_ID), TASK_ID)
    assert header is not None
    assert header.snapshot["context"]["declines"] == 2
    assert rejected == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (123, "not a string"),
        ("{not json", "not JSON"),
        ("[1]", "not an object"),
        ("x" * (MAX_HEADER_CHARS + 1), "too large"),
    ],
)
def test_malformed_headers_are_rejected_before_parsing(
    machine: Any, rejected: list[dict[str, object]], value: Any, reason: str
) -> None:
    """A header that is not a bounded JSON object never reaches the snapshot restore."""
    assert _codec(machine).decode(_headers(value), TASK_ID) is None
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
        settled = run_chart(
            machine, codec.decode(_headers(value), TASK_ID), Run(call=_fail), codec.reject
        )
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
        codec.decode(_headers(data), TASK_ID),
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
    headers = codec.encode(json.dumps(_after_one_failure(machine)), TASK_ID)
    assert set(headers) == {HEADER, TASK_HEADER, SIGNATURE_HEADER}
    assert codec.decode(headers, TASK_ID) is not None
    assert codec.decode(_headers(headers[HEADER]), TASK_ID) is None
    assert codec.decode({**headers, SIGNATURE_HEADER: "0" * 64}, TASK_ID) is None
    other = _codec(machine, b"o" * 32).encode(headers[HEADER], TASK_ID)
    assert codec.decode(other, TASK_ID) is None
    assert [r["reason"] for r in rejected] == ["unsigned", "bad signature", "bad signature"]


def test_a_signed_header_changed_after_signing_is_rejected(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """Changing one character of a signed snapshot breaks its signature."""
    codec = _codec(machine, KEY)
    headers = codec.encode(json.dumps(_after_one_failure(machine)), TASK_ID)
    forged = headers[HEADER].replace('"attempt": 1', '"attempt": 0')
    assert forged != headers[HEADER]
    assert codec.decode({**headers, HEADER: forged}, TASK_ID) is None
    assert [r["reason"] for r in rejected] == ["bad signature"]


@pytest.mark.parametrize("raw", [b"short", 12345, "too short"])
def test_a_weak_or_mistyped_signing_key_is_refused(raw: Any) -> None:
    """The key must be a string or bytes of at least 32 bytes; the message says how to make one."""
    with pytest.raises(ConfigurationError, match=r"secrets\.token_hex"):
        signing_key({"xsm_signing_key": raw})


def test_no_signing_key_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset or empty leaves signing off outside Django; a string key is used as its bytes."""
    monkeypatch.setattr(header_module, "django_secret_key", lambda: None)
    assert signing_key({}) is None
    assert signing_key({"xsm_signing_key": ""}) is None
    assert signing_key({"xsm_signing_key": "s" * 32}) == b"s" * 32


def test_signing_key_never_imports_django_outside_a_django_project() -> None:
    """A process that never imported django.conf and names no settings module stays unsigned."""
    code = (
        "import sys\n"
        "from xsm_celery.celery.task.header import signing_key\n"
        "assert signing_key({}) is None\n"
        "assert 'django.conf' not in sys.modules, sorted(sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT, timeout=60)


def _spent(machine: Any, failures: int, tag: str) -> dict[str, Any]:
    """The snapshot a real run writes after ``failures`` failures whose messages name ``tag``."""
    codec, headers, count = _codec(machine), None, 0

    def fail() -> None:
        nonlocal count
        count += 1
        raise ConnectionError(f"{tag} failure {count}")

    for _ in range(failures):
        header = None if headers is None else codec.decode(headers, tag)
        settled = run_chart(machine, header, Run(call=fail), codec.reject)
        assert settled.verdict is Verdict.RETRY
        headers = codec.encode(settled.interpreter.get_snapshot(), tag)
    assert headers is not None
    return json.loads(headers[HEADER])  # type: ignore[no-any-return]


@pytest.mark.parametrize("attempt", range(POLICY.max_attempts))
def test_a_waiting_counter_below_the_budget_is_accepted(machine: Any, attempt: int) -> None:
    """Attempts 0 to max_attempts - 1 are what a chart waiting on its retry timer can hold."""
    data = _spent(machine, 1, TASK_ID)
    data["context"]["attempt"] = attempt
    data["context"][ERRORS_CONTEXT_KEY] = data["context"][ERRORS_CONTEXT_KEY][:attempt]
    header = _codec(machine).decode(_headers(data), TASK_ID)
    assert header is not None
    assert header.attempt == attempt


def test_a_header_at_the_spent_budget_runs_the_body_instead_of_giving_up(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """attempt = max_attempts with a real error chain: refused, and the function runs."""
    data = _spent(machine, POLICY.max_attempts - 1, TASK_ID)
    data["context"]["attempt"] = POLICY.max_attempts
    codec, calls = _codec(machine), []
    header = codec.decode(_headers(data), TASK_ID)
    settled = run_chart(machine, header, Run(call=lambda: calls.append(1)), codec.reject)
    assert header is None
    assert settled.verdict is Verdict.DONE
    assert calls == [1]
    assert [r["reason"] for r in rejected] == ["attempt out of range"]


def _shapes(machine: Any) -> Iterator[dict[str, Any]]:
    """Every header shape built from a real retry: each state, counter, mark, status, timer."""
    base = _spent(machine, 1, TASK_ID)
    states = sorted(node.id for node in machine.iter_states() if node.id != machine.id)
    for state, attempt, mark, status, timers in itertools.product(
        states,
        range(-1, POLICY.max_attempts + 2),
        (False, True),
        ("running", "done"),
        (True, False),
    ):
        data = json.loads(json.dumps(base))
        data["state_ids"], data["status"] = [state], status
        data["context"]["attempt"] = attempt
        if mark:
            data["context"]["_xsm_attempt_give_up"] = "ConnectionError"
        if not timers:
            data["deadlines"] = []
        yield data


def test_no_header_shape_skips_the_body_or_gives_up_unrun(machine: Any) -> None:
    """Whatever state, counter, give-up mark, status or timer a header claims, the body runs."""
    codec, shapes = _codec(machine), 0
    for data in _shapes(machine):
        calls: list[int] = []
        header = codec.decode(_headers(data), TASK_ID)
        run = Run(call=lambda calls=calls: calls.append(1))
        settled = run_chart(machine, header, run, codec.reject)
        assert calls == [1], data
        assert settled.verdict is Verdict.DONE, data
        shapes += 1
    assert shapes > 100


def test_a_timer_that_would_give_up_unrun_is_refused_even_past_the_codec(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """The run itself refuses a waiting chart whose timer leads straight to a dead letter."""
    data = _spent(machine, POLICY.max_attempts - 1, TASK_ID)
    data["context"]["attempt"] = POLICY.max_attempts
    header = ChartHeader(snapshot=data, attempt=POLICY.max_attempts, same_structure=True)
    calls: list[int] = []
    settled = run_chart(machine, header, Run(call=lambda: calls.append(1)), _codec(machine).reject)
    assert calls == [1]
    assert settled.verdict is Verdict.DONE
    assert [r["reason"] for r in rejected] == ["gives up without running"]


def test_an_unsigned_header_is_used_only_by_the_task_it_was_written_for(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """A header without its task id, or written for another id, is refused with a fixed reason."""
    codec = _codec(machine)
    headers = codec.encode(json.dumps(_spent(machine, 1, "task-a")), "task-a")
    assert headers[TASK_HEADER] == "task-a"
    assert codec.decode(headers, "task-a") is not None
    assert codec.decode(headers, "task-b") is None
    assert codec.decode({HEADER: headers[HEADER]}, "task-a") is None
    assert codec.decode({**headers, TASK_HEADER: 7}, "task-a") is None
    assert [r["reason"] for r in rejected] == ["another task's header"] * 3


def test_a_signed_header_copied_onto_another_task_fails(
    machine: Any, rejected: list[dict[str, object]]
) -> None:
    """The signature covers the task id: renaming the id breaks it, keeping it names another."""
    codec = _codec(machine, KEY)
    headers = codec.encode(json.dumps(_spent(machine, 1, "task-a")), "task-a")
    assert codec.decode(headers, "task-a") is not None
    assert codec.decode(headers, "task-b") is None
    assert codec.decode({**headers, TASK_HEADER: "task-b"}, "task-b") is None
    assert [r["reason"] for r in rejected] == ["another task's header", "bad signature"]
    split = codec.encode(headers[HEADER], "task-")
    assert split[SIGNATURE_HEADER] != codec.encode("a" + headers[HEADER], "task")[SIGNATURE_HEADER]


def test_another_tasks_error_chain_never_reaches_this_tasks_dead_letter(machine: Any) -> None:
    """Task b given task a's last real header (counter at the budget) fails on its own errors."""
    copied = _spent(machine, POLICY.max_attempts - 1, "task-a")
    copied["context"]["attempt"] = POLICY.max_attempts
    codec = _codec(machine)
    headers: dict[str, Any] = {**_headers(copied, "task-a")}
    calls: list[int] = []

    def fail() -> None:
        calls.append(1)
        raise ConnectionError(f"task-b failure {len(calls)}")

    for _ in range(POLICY.max_attempts + 2):
        settled = run_chart(machine, codec.decode(headers, "task-b"), Run(call=fail), codec.reject)
        if settled.verdict is not Verdict.RETRY:
            break
        headers = codec.encode(settled.interpreter.get_snapshot(), "task-b")
    assert settled.verdict is Verdict.GIVE_UP
    assert len(calls) == POLICY.max_attempts
    errors = settled.interpreter.context[ERRORS_CONTEXT_KEY]
    assert [e["message"] for e in errors] == [f"task-b failure {n}" for n in (1, 2, 3)]


def test_verified_snapshot_is_empty_for_another_tasks_header(machine: Any) -> None:
    """What admission puts in a dead letter: the checked snapshot of this task id, or nothing."""
    codec = _codec(machine)
    data = _spent(machine, 1, "task-a")
    headers = codec.encode(json.dumps(data), "task-a")
    assert codec.verified_snapshot(headers, "task-a")["context"] == data["context"]
    assert codec.verified_snapshot(headers, "task-b") == {}
    assert codec.verified_snapshot(None, "task-a") == {}


def _chart_app(name: str) -> Celery:
    app = Celery(name, set_as_current=False)
    app.conf.xsm_dead_letter_store = "memory://header-tests"
    app.task(base=ChartTask, name=f"{name}.charge", shared=False)(_fail)
    return app


def test_a_worker_with_unsigned_headers_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """worker_ready logs what an unsigned header can and cannot do, once per worker."""
    monkeypatch.setattr(header_module, "django_secret_key", lambda: None)
    assert _warn_unsigned_headers in [ref() for _, ref in signals.worker_ready.receivers]
    consumer = SimpleNamespace(app=_chart_app("unsigned"))
    with caplog.at_level(logging.WARNING, logger="xsm_celery.celery.task.chart_task"):
        _warn_unsigned_headers(sender=consumer)
        _warn_unsigned_headers(sender=consumer)
    warned = [r for r in caplog.records if r.name == "xsm_celery.celery.task.chart_task"]
    assert [r.getMessage() for r in warned] == [UNSIGNED_WARNING]
    assert warned[0].levelno == logging.WARNING
    for phrase in (
        "cannot skip",
        "give up without running",
        "another task id",
        "xsm_signing_key",
        "max_attempts - 1",
    ):
        assert phrase in UNSIGNED_WARNING


def test_a_worker_that_signs_or_runs_no_chart_task_stays_quiet(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With a key, or without chart tasks, there is no unsigned header to warn about."""
    monkeypatch.setattr(header_module, "django_secret_key", lambda: None)
    signed = _chart_app("signed")
    signed.conf.xsm_signing_key = "s" * 32
    plain = Celery("plain", set_as_current=False)
    plain.task(name="plain.noop", shared=False)(_fail)
    # Shared chart tasks other test modules defined join every app; this one has none.
    for name in [n for n, t in plain.tasks.items() if isinstance(t, ChartTask)]:
        plain.tasks.pop(name)
    with caplog.at_level(logging.WARNING, logger="xsm_celery.celery.task.chart_task"):
        assert warn_if_unsigned(signed) is False
        assert warn_if_unsigned(plain) is False
    assert [r for r in caplog.records if r.name == "xsm_celery.celery.task.chart_task"] == []
