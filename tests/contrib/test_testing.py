"""contrib.testing: the brokers at the documented path, replay and its consistency check."""

from __future__ import annotations

import pytest

from tests.eda.charts import counter, order
from xsm_celery import create_machine
from xsm_celery.contrib import testing
from xsm_celery.eda import Envelope, InboundDispatcher
from xsm_celery.persistence import MemoryStore


def test_brokers_are_the_core_ones() -> None:
    """contrib.testing.FakeBrokerAdapter is xsm_celery.eda.FakeBrokerAdapter."""
    from xsm_celery import eda

    assert testing.FakeBrokerAdapter is eda.FakeBrokerAdapter
    assert testing.SyncFakeBrokerAdapter is eda.SyncFakeBrokerAdapter


def test_replay_runs_events_envelopes_and_time() -> None:
    """replay() sends events and envelopes and advances the clock for numbers."""
    machine = create_machine(
        {
            "id": "t",
            "initial": "a",
            "states": {"a": {"on": {"GO": "b"}}, "b": {"after": {"500": "c"}}, "c": {}},
        }
    )
    interp = testing.replay(machine, [Envelope.new(type="xsm.t.GO", subject="x"), 499])
    assert interp.matches("t.b")
    interp = testing.replay(machine, ["GO", 500])
    assert interp.matches("t.c")
    interp.stop()


def test_replay_refuses_bools() -> None:
    """A bool is neither an event nor a duration."""
    with pytest.raises(TypeError):
        testing.replay(counter(), [True])


def test_stored_instance_is_consistent_with_its_events() -> None:
    """A dispatcher-built instance equals the replay of the envelopes it consumed."""
    store = MemoryStore()
    dispatcher = InboundDispatcher(store, {"xsm.order.PAY": order()})
    pay = Envelope.new(type="xsm.order.PAY", subject="o-1", data={"total": 5})
    dispatcher.handle(pay)
    interp = testing.assert_replay_consistent(order(), [pay], store.load("o-1"))
    assert interp.context["total"] == 5


def test_divergence_is_reported() -> None:
    """A stored state the events do not produce fails with what differs."""
    store = MemoryStore()
    dispatcher = InboundDispatcher(store, {"xsm.order.PAY": order()})
    dispatcher.handle(Envelope.new(type="xsm.order.PAY", subject="o-1", data={"total": 5}))
    other = Envelope.new(type="xsm.order.PAY", subject="o-1", data={"total": 6})
    with pytest.raises(AssertionError, match=r"context\['total'\] 6 != expected 5"):
        testing.assert_replay_consistent(order(), [other], store.load("o-1").snapshot)
    with pytest.raises(AssertionError, match="states"):
        testing.assert_replay_consistent(order(), [], store.load("o-1"))


def test_compare_with_an_interpreter() -> None:
    """An interpreter can be the expected side."""
    live = testing.replay(counter(), ["INC", "INC"])
    testing.assert_replay_consistent(counter(), ["INC", "INC"], live)
    with pytest.raises(TypeError):
        testing.assert_replay_consistent(counter(), [], 42)
