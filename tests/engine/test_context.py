"""Context as a callable with input, and a context model validating the user's keys per step."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from tests.engine.drivers import AsyncHandle, Interp
from xsm_celery import (
    Interpreter,
    InvalidConfigError,
    MachineLogic,
    SyncInterpreter,
    create_machine,
)
from xsm_celery.contrib.pydantic import context_model
from xsm_celery.errors import ContextValidationError


def counter(context: Any) -> dict[str, Any]:
    """A machine whose ADD adds the event's ``by`` to ``count``."""
    return {
        "id": "m",
        "initial": "a",
        "context": context,
        "states": {"a": {"on": {"ADD": {"actions": "add"}, "BREAK": {"actions": "corrupt"}}}},
    }


LOGIC = MachineLogic(
    actions={
        "add": lambda i, c, e, a: c.__setitem__("count", c["count"] + e.payload["by"]),
        "corrupt": lambda i, c, e, a: c.__setitem__("count", "many"),
    }
)


def test_context_callable_gives_each_interpreter_a_fresh_dict_from_its_input() -> None:
    """A callable context is called per interpreter with {"input": ...}; instances never share it."""
    machine = create_machine(
        counter(lambda a: {"count": (a["input"] or {}).get("start", 0), "seen": []}), logic=LOGIC
    )
    first = _with_input(machine, {"start": 10})
    second = _with_input(machine, None)
    first.send("ADD", by=1)
    first.context["seen"].append("x")
    assert first.context == {"count": 11, "seen": ["x"]}
    assert second.context == {"count": 0, "seen": []}
    assert first.input == {"start": 10}


@pytest.mark.parametrize(
    "context",
    [{"count": 0, "name": "n", "ratio": 0.5, "on": True, "none": None}, {"count": 0, "seen": []}],
    ids=["flat scalars", "nested list"],
)
def test_a_dict_context_is_copied_per_interpreter(context: dict[str, Any]) -> None:
    """Each interpreter gets its own copy of the chart's context, flat or nested.

    A flat dict of scalars is copied shallowly (the fast path), anything else deeply; either
    way one interpreter's changes reach neither another interpreter nor the machine.
    """
    machine = create_machine(counter(context), logic=LOGIC)
    first = Interp(machine).start()
    second = Interp(machine).start()
    first.send("ADD", by=2)
    if "seen" in context:
        first.context["seen"].append("x")
        assert second.context["seen"] == []
        assert machine.initial_context["seen"] == []
    assert first.context["count"] == 2
    assert second.context["count"] == 0
    assert machine.initial_context == context
    assert first.context is not second.context


def _with_input(machine: Any, value: Any) -> Any:
    """An interpreter of the current driver created with ``input=value``."""
    if Interp.is_async:
        handle = Interp(machine)
        return AsyncHandle(Interpreter(machine, input=value), handle.loop).start()
    return SyncInterpreter(machine, input=value).start()


def test_context_callable_returning_a_non_dict_is_refused() -> None:
    """A context factory that returns something else fails with a TypeError saying so."""
    machine = create_machine(counter(lambda a: ["not", "a", "dict"]), logic=LOGIC)
    with pytest.raises(TypeError, match="return a dict"):
        Interp(machine)


class Counter(pydantic.BaseModel):
    """The user's context keys; extra keys are refused."""

    model_config = pydantic.ConfigDict(extra="forbid")
    count: int


def test_context_model_validates_after_each_step_and_contains_a_failure() -> None:
    """A step that breaks the model records ContextValidationError; the machine keeps running."""
    machine = create_machine(counter({"count": 0}), logic=LOGIC, context_model=Counter)
    interp = Interp(machine).start()
    receipt = interp.send("ADD", by=2, wait=True)
    assert receipt.error is None
    receipt = interp.send("BREAK", wait=True)
    assert isinstance(receipt.error, ContextValidationError)
    assert "count" in str(receipt.error)
    assert isinstance(interp.last_error, ContextValidationError)
    assert interp.status == "running"


def test_private_keys_are_filtered_before_validation() -> None:
    """_xsm_ keys (the dead-letter chain) never reach a model with extra='forbid'."""
    machine = create_machine(counter({"count": 0}), logic=LOGIC, context_model=Counter)
    interp = Interp(machine).start()
    interp.context["_xsm_errors"] = [{"message": "x"}]
    receipt = interp.send("ADD", by=1, wait=True)
    assert receipt.error is None
    assert interp.context["_xsm_errors"] == [{"message": "x"}]


def test_context_model_writes_coerced_values_back() -> None:
    """With write_back the model's coerced values replace the raw ones."""
    machine = create_machine(
        counter({"count": 0}),
        logic=LOGIC.merge(
            MachineLogic(actions={"add": lambda i, c, e, a: c.__setitem__("count", "7")})
        ),
        context_validator=context_model(Counter),
    )
    interp = Interp(machine).start()
    interp.send("ADD", by=1)
    assert interp.context["count"] == 7


def test_an_initial_context_the_model_refuses_is_a_chart_error() -> None:
    """A static initial context that fails the model is refused at create_machine."""
    with pytest.raises(InvalidConfigError) as caught:
        create_machine(counter({"count": "lots"}), logic=LOGIC, context_model=Counter)
    assert caught.value.path == "context"


def test_context_model_needs_a_pydantic_model() -> None:
    """Anything but a BaseModel subclass is a TypeError naming it."""
    with pytest.raises(TypeError, match="BaseModel"):
        create_machine(counter({"count": 0}), context_model=dict)
