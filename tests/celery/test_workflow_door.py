"""Bad input at the workflow layer's door: names, keys, event ids and payloads are refused early.

Every refusal happens in the caller's process, before a task message is sent or a store is
written, with the package's errors (never ``RecursionError`` or a database error). Workflows
run on the memory store and Celery's in-memory broker, so nothing here needs a service.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.celery.workflow_charts import order_machine
from xsm_celery.celery import Workflow, Xsm
from xsm_celery.celery.workflow.checks import (
    MAX_EVENT_ID_LENGTH,
    MAX_PAYLOAD_DEPTH,
    MAX_WORKFLOW_NAME_LENGTH,
    InstanceKeyError,
)
from xsm_celery.errors import ArgumentTypeError, ConfigurationError, InvalidEventError, StoreError
from xsm_celery.persistence.memory import MAX_KEY_LENGTH


@pytest.fixture
def app() -> Iterator[Celery]:
    """A producer app on Celery's in-memory broker."""
    celery = Celery(f"door-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    celery.conf.xsm_timer_countdown_max_s = 5.0
    yield celery
    celery.close()


def _workflow(app: Celery, name: Any = "orders") -> Workflow:
    return Xsm(app).workflow(order_machine(f"{app.main}.charge"), store="memory://", name=name)


def _nested(depth: int, *, as_list: bool = False) -> Any:
    """A value of ``depth`` dicts (or lists) nested in one another, built without recursion."""
    value: Any = 1
    for _ in range(depth):
        value = [value] if as_list else {"k": value}
    return value


# Workflow names


@pytest.mark.parametrize(
    "name",
    [
        "",
        "my orders",
        " orders",
        "orders\n",
        "orders\tv2",
        "orders\u00a0v2",
        "shop:orders",
        "orders\x07",
        "orders\u200b",
        "o" * (MAX_WORKFLOW_NAME_LENGTH + 1),
    ],
)
def test_a_name_celery_or_the_stores_cannot_use_is_refused(app: Celery, name: str) -> None:
    """Empty, whitespace, ':', control characters or too long: refused with a good example."""
    with pytest.raises(ConfigurationError, match=r"name='orders'"):
        _workflow(app, name)
    assert f"xsm.workflow.{name}" not in app.tasks


@pytest.mark.parametrize("name", [42, b"orders", ["orders"]])
def test_a_name_that_is_not_a_str_is_refused_not_converted(app: Celery, name: Any) -> None:
    """A non-str name is a type error, not str()-ed into a task name like "b'orders'"."""
    with pytest.raises(ArgumentTypeError, match="must be a str"):
        _workflow(app, name)
    assert not [t for t in app.tasks if t.startswith("xsm.workflow.")]


def test_good_names_are_kept_as_given(app: Celery) -> None:
    """Dots, dashes, underscores, non-ASCII letters and the longest name all work."""
    longest = "n" * MAX_WORKFLOW_NAME_LENGTH
    for name in ("billing.invoices_v2", "kyc-checks", "commandes_été", longest):
        flow = _workflow(app, name)
        assert flow.name == name
        assert flow.task.name == f"xsm.workflow.{name}"
    room = MAX_KEY_LENGTH - MAX_WORKFLOW_NAME_LENGTH - 1
    assert flow.start("k" * room).value == "created"


# Instance keys


def test_a_key_that_fits_alone_but_not_with_the_prefix_is_refused_naming_the_room(
    app: Celery,
) -> None:
    """The store key is '<name>:<key>': a 194-character key of 'orders' has 193 places."""
    orders = _workflow(app, "orders")
    room = MAX_KEY_LENGTH - len("orders:")
    fits, too_long = "k" * room, "k" * (room + 1)
    assert len(too_long) <= MAX_KEY_LENGTH
    assert orders.start(fits).key == fits
    calls = {
        "start": lambda: orders.start(too_long),
        "send": lambda: orders.send(too_long, "NOTE"),
        "send_now": lambda: orders.send_now(too_long, "NOTE"),
        "get": lambda: orders.get(too_long),
    }
    for call in calls.values():
        with pytest.raises(InstanceKeyError, match=f"room for {room}") as caught:
            call()
        assert isinstance(caught.value, ConfigurationError)
        assert isinstance(caught.value, StoreError)
    assert orders.keys() == [fits]


@pytest.mark.parametrize("key", ["", "o\x0042", 42, None])
def test_an_unusable_key_is_refused_before_anything_is_sent(app: Celery, key: Any) -> None:
    """Empty, NUL or not a str: the message names the workflow and nothing is stored."""
    orders = _workflow(app)
    with pytest.raises(InstanceKeyError, match="workflow 'orders'"):
        orders.send(key, "NOTE")
    with pytest.raises(InstanceKeyError):
        orders.send_now(key, "NOTE")
    assert orders.keys() == []


# Event ids


@pytest.mark.parametrize(
    ("event_id", "why"),
    [
        (123, "non-empty str"),
        (b"evt-1", "non-empty str"),
        ("", "non-empty str"),
        ("e" * (MAX_EVENT_ID_LENGTH + 1), "over the inbox's 255"),
        ("evt\x001", "NUL"),
        ("ledger:" + "0" * 40, "ledger"),
    ],
)
def test_an_event_id_the_inbox_cannot_keep_is_refused(app: Celery, event_id: Any, why: str) -> None:
    """send() and send_now() refuse it with InvalidEventError, before the step runs."""
    orders = _workflow(app)
    with pytest.raises(InvalidEventError, match=why):
        orders.send("o-1", "NOTE", event_id=event_id)
    with pytest.raises(InvalidEventError, match=why):
        orders.send_now("o-1", "NOTE", event_id=event_id)
    assert orders.get("o-1") is None


def test_the_longest_event_id_still_deduplicates(app: Celery) -> None:
    """A 255-character id is accepted, and sending it twice applies the event once."""
    orders = _workflow(app)
    event_id = "e" * MAX_EVENT_ID_LENGTH
    orders.send_now("o-2", "NOTE", event_id=event_id)
    view = orders.send_now("o-2", "NOTE", event_id=event_id)
    assert view.context["events"] == 1


# Payloads and start contexts


def test_a_payload_at_the_bound_passes_and_one_level_more_is_refused(app: Celery) -> None:
    """MAX_PAYLOAD_DEPTH levels (the payload dict included) pass; one more is refused."""
    orders = _workflow(app)
    ok = _nested(MAX_PAYLOAD_DEPTH - 1)
    assert orders.send_now("o-3", "NOTE", doc=ok).context["events"] == 1
    deep = _nested(MAX_PAYLOAD_DEPTH)
    with pytest.raises(InvalidEventError, match=f"more than {MAX_PAYLOAD_DEPTH}"):
        orders.send("o-3", "NOTE", doc=deep)
    with pytest.raises(InvalidEventError, match=f"more than {MAX_PAYLOAD_DEPTH}"):
        orders.send_now("o-3", "NOTE", doc=deep)
    with pytest.raises(InvalidEventError, match="start context"):
        orders.start("o-4", context={"doc": deep})
    assert orders.get("o-4") is None


def test_a_very_deep_or_self_containing_payload_is_refused_without_recursion(
    app: Celery,
) -> None:
    """100 000 levels or a list inside itself give InvalidEventError, not RecursionError."""
    orders = _workflow(app)
    with pytest.raises(InvalidEventError, match="deep"):
        orders.send("o-5", "NOTE", doc=_nested(100_000, as_list=True))
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidEventError, match="contains itself"):
        orders.send_now("o-5", "NOTE", doc=loop)
    with pytest.raises(InvalidEventError, match="start context"):
        orders.start("o-5", context={"doc": _nested(100_000)})


def test_values_json_cannot_carry_are_still_refused(app: Celery) -> None:
    """The JSON check moved to checks.py keeps refusing objects, sets and NaN."""
    orders = _workflow(app)
    for value in (object(), {1, 2}, float("nan")):
        with pytest.raises(InvalidEventError, match="JSON"):
            orders.send("o-6", "NOTE", value=value)
    with pytest.raises(InvalidEventError, match="JSON"):
        orders.start("o-6", context={"at": object()})


@settings(max_examples=40, deadline=None)
@given(
    depth=st.integers(min_value=0, max_value=3_000),
    as_list=st.booleans(),
    via=st.sampled_from(["send", "send_now", "start"]),
)
def test_any_nesting_depth_is_accepted_or_refused_never_crashes(
    depth: int, as_list: bool, via: str
) -> None:
    """Whatever the depth, the door answers success or InvalidEventError, decided by the bound."""
    celery = Celery(f"door-{uuid.uuid4().hex[:8]}", broker="memory://", set_as_current=False)
    try:
        orders = _workflow(celery)
        doc = _nested(depth, as_list=as_list)
        calls = {
            "send": lambda: orders.send("o-7", "NOTE", doc=doc),
            "send_now": lambda: orders.send_now("o-7", "NOTE", doc=doc),
            "start": lambda: orders.start("o-7", context={"doc": doc}),
        }
        try:
            calls[via]()
        except InvalidEventError:
            accepted = False
        else:
            accepted = True
        assert accepted == (depth + 1 <= MAX_PAYLOAD_DEPTH)
    finally:
        celery.close()
