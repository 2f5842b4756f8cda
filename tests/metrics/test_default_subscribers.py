"""A worker's default fact subscribers take only the kinds they read.

Every attempt of every chart task would otherwise build two facts (started, finished) that
the status board and the fact logger drop at once. Run in a fresh interpreter, so no other
test's subscriber is on the fact stream.
"""

from __future__ import annotations

from typing import Any

from tests.isolation import run_fresh


class FakeWorker:
    """What ``worker_init`` hands its receivers: the worker, with its app and hostname."""

    def __init__(self, app: Any, hostname: str) -> None:
        self.app = app
        self.hostname = hostname


def scenario() -> None:
    """Start the defaults as ``worker_init`` does, then check which kinds are wanted."""
    from celery import Celery, signals

    from xsm_celery import hooks
    from xsm_celery.celery import observability_config
    from xsm_celery.celery import signals as xsm_signals
    from xsm_celery.hooks import FactKind

    assert hooks.subscribers() == ()
    app = Celery("defaults", set_as_current=False)
    assert observability_config(app).log_facts
    signals.worker_init.send(sender=FakeWorker(app, "celery@defaults"))
    assert len(hooks.subscribers()) == 2, hooks.subscribers()  # the board and the logger
    xsm_signals.circuit_opened.connect(lambda **_: None, weak=False)
    assert len(hooks.subscribers()) == 3  # and the bridge to the Celery signals
    for kind in (FactKind.ATTEMPT_STARTED, FactKind.ATTEMPT_FINISHED, FactKind.LIMIT_ADMITTED):
        assert not hooks.wants(kind), kind
    for kind in (
        FactKind.BREAKER_TRANSITION,  # the board, and the circuit signals
        FactKind.LIMIT_DEFERRED,  # the logger
        FactKind.RETRY_SCHEDULED,  # the logger
        FactKind.DEAD_LETTER_WRITTEN,  # the logger
    ):
        assert hooks.wants(kind), kind

    traced = Celery("traced", set_as_current=False)
    traced.conf.xsm_tracing = True
    signals.worker_init.send(sender=FakeWorker(traced, "celery@traced"))
    assert hooks.wants(FactKind.ATTEMPT_STARTED)
    assert hooks.wants(FactKind.ATTEMPT_FINISHED)


def test_the_defaults_build_no_attempt_facts() -> None:
    run_fresh("tests.metrics.test_default_subscribers", "scenario")


def test_the_scenario_sees_what_a_catch_all_subscriber_would_want() -> None:
    """The check can fail: a subscriber without kinds makes the attempt facts wanted."""
    from xsm_celery import hooks
    from xsm_celery.hooks import FactKind

    stop = hooks.subscribe(lambda fact: None)
    try:
        assert hooks.wants(FactKind.ATTEMPT_STARTED)
    finally:
        stop()
