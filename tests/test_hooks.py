"""The fact stream: subscribers see what is emitted, and a failing one breaks nothing."""

from __future__ import annotations

import logging

import pytest

from xsm_celery import hooks
from xsm_celery.hooks import Fact, FactKind


@pytest.fixture(autouse=True)
def _no_leftover_subscribers() -> None:
    for subscriber in hooks.subscribers():
        hooks.unsubscribe(subscriber)


def test_subscriber_receives_emitted_facts_in_order() -> None:
    """Each emitted fact reaches a subscriber with its kind and fields."""
    seen: list[Fact] = []
    stop = hooks.subscribe(seen.append)
    hooks.emit(FactKind.RETRY_SCHEDULED, task="t", delay_ms=500)
    hooks.emit(FactKind.GAVE_UP, task="t")
    stop()
    hooks.emit(FactKind.GAVE_UP, task="after")
    assert [(f.kind, dict(f.fields)) for f in seen] == [
        (FactKind.RETRY_SCHEDULED, {"task": "t", "delay_ms": 500}),
        (FactKind.GAVE_UP, {"task": "t"}),
    ]


def test_failing_subscriber_is_logged_and_the_next_one_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A subscriber that raises is logged; later subscribers and the caller carry on."""
    seen: list[FactKind] = []

    def broken(fact: Fact) -> None:
        raise RuntimeError("sink down")

    hooks.subscribe(broken)
    hooks.subscribe(lambda fact: seen.append(fact.kind))
    with caplog.at_level(logging.ERROR, logger="xsm_celery.hooks"):
        hooks.emit(FactKind.TIMER_FIRED, lag_s=0.5)
    assert seen == [FactKind.TIMER_FIRED]
    assert "timer_fired" in caplog.text


def test_fields_are_read_only() -> None:
    """One subscriber cannot change the fields the next one sees."""
    captured: list[Fact] = []
    hooks.subscribe(captured.append)
    hooks.emit(FactKind.LIMIT_DEFERRED, limit="payments")
    with pytest.raises(TypeError):
        captured[0].fields["limit"] = "other"  # type: ignore[index]


def test_fact_kind_values_are_unique_snake_case_names() -> None:
    """Exporters key on the values, so each is a distinct snake_case name."""
    values = [kind.value for kind in FactKind]
    assert len(values) == len(set(values))
    assert all(v == v.lower() and " " not in v for v in values)


def test_a_subscriber_of_some_kinds_gets_only_those_and_keeps_its_order() -> None:
    """``kinds`` filters per subscriber; the others still see every kind, in order."""
    every: list[tuple[str, FactKind]] = []
    some: list[tuple[str, FactKind]] = []
    stop_all = hooks.subscribe(lambda f: every.append(("all", f.kind)))
    stop_some = hooks.subscribe(lambda f: some.append(("some", f.kind)), [FactKind.GAVE_UP])
    hooks.emit(FactKind.RETRY_SCHEDULED, task="t")
    hooks.emit(FactKind.GAVE_UP, task="t")
    assert every == [("all", FactKind.RETRY_SCHEDULED), ("all", FactKind.GAVE_UP)]
    assert some == [("some", FactKind.GAVE_UP)]
    stop_all()
    hooks.emit(FactKind.RETRY_SCHEDULED, task="t")
    assert len(every) == 2
    stop_some()


def test_wants_tells_whether_anyone_receives_a_kind() -> None:
    """A hot path asks ``wants`` before building a fact nobody would receive."""
    assert not hooks.wants(FactKind.ATTEMPT_STARTED)
    stop = hooks.subscribe(lambda f: None, {FactKind.GAVE_UP})
    assert hooks.wants(FactKind.GAVE_UP)
    assert not hooks.wants(FactKind.ATTEMPT_STARTED)
    stop_all = hooks.subscribe(lambda f: None)
    assert hooks.wants(FactKind.ATTEMPT_STARTED)
    stop_all()
    stop()
    assert not hooks.wants(FactKind.GAVE_UP)
    assert hooks.subscribers() == ()


def test_an_unknown_kind_is_refused_at_subscribe() -> None:
    """A misspelt kind fails when subscribing, not silently by never matching."""
    with pytest.raises(ValueError, match="not_a_kind"):
        hooks.subscribe(lambda f: None, ["not_a_kind"])  # type: ignore[list-item]
