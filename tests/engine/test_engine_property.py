"""Random charts and event sequences: both engines end alike, and only XsmErrors escape.

The charts are small and guard-free: atomic, compound and final states nested up to two
levels, transitions on three events to any state (or none), ``raise`` actions, entry raises,
``onDone`` and the odd ``always``. Many of them feed themselves, so runaway chains are common;
the property is that every input ends in a result or a named ``XsmError`` (never
``RecursionError`` or another bare exception), and that the sync interpreter and the async one
(whose run loop yields between slices) take the same steps.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xsm_celery import Interpreter, MachineLogic, SyncInterpreter, create_machine
from xsm_celery.errors import XsmError

EVENTS = ("A", "B", "C")


def record(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Append the event type to the context: the order actions ran in."""
    ctx.setdefault("trail", []).append(event.type)


LOGIC = MachineLogic(actions={"record": record})


@st.composite
def charts(draw: st.DrawFn) -> dict[str, Any]:
    """A random chart; every state has an ``id`` (``n<k>``) so targets read ``#n<k>``."""
    ids: list[str] = []
    nodes: list[dict[str, Any]] = []

    def state(depth: int, may_be_final: bool) -> dict[str, Any]:
        node: dict[str, Any] = {"id": f"n{len(ids)}"}
        ids.append(node["id"])
        nodes.append(node)
        kind = draw(
            st.sampled_from(
                ["atomic", "compound", "final"] if may_be_final else ["atomic", "compound"]
            )
        )
        if kind == "final":
            node["type"] = "final"
        elif kind == "compound" and depth < 2:
            count = draw(st.integers(1, 3))
            node["states"] = {f"c{i}": state(depth + 1, i > 0) for i in range(count)}
            node["initial"] = "c0"
        return node

    top = draw(st.integers(1, 4))
    chart: dict[str, Any] = {
        "id": "m",
        "initial": "s0",
        "context": {},
        "states": {f"s{i}": state(1, False) for i in range(top)},
    }

    def action() -> Any:
        return draw(
            st.sampled_from(
                ["record", *({"type": "raise", "params": {"event": e}} for e in EVENTS)]
            )
        )

    def transition() -> dict[str, Any]:
        spec: dict[str, Any] = {"actions": draw(st.lists(st.builds(action), max_size=2))}
        target = draw(st.none() | st.sampled_from(ids))
        if target is not None:
            spec["target"] = f"#{target}"
        return spec

    for node in nodes:
        if node.get("type") == "final":
            continue
        handled = draw(st.lists(st.sampled_from(EVENTS), unique=True, max_size=2))
        if handled:
            node["on"] = {event: transition() for event in handled}
        if draw(st.booleans()):
            node["entry"] = [action()]
        if "states" in node and draw(st.booleans()):
            node["onDone"] = transition()
        if draw(st.integers(0, 9)) == 0:
            node["always"] = {"target": f"#{draw(st.sampled_from(ids))}"}
    return chart


Outcome = tuple[str | None, Any, Any]


def _outcome(error: BaseException | None, interp: Any) -> Outcome:
    if error is not None and not isinstance(error, XsmError):
        raise AssertionError(f"a bare {type(error).__name__} escaped: {error}") from error
    return (type(error).__name__ if error else None, interp.value, interp.context)


def run_sync(machine: Any, events: list[str]) -> list[Outcome]:
    """Start and send each event on SyncInterpreter; what each call ended in."""
    interp = SyncInterpreter(machine)
    outcomes = []
    error: BaseException | None = None
    try:
        interp.start()
    except Exception as exc:
        error = exc
    outcomes.append(_outcome(error, interp))
    for event in events:
        error = None
        try:
            interp.send(event)
        except Exception as exc:
            error = exc
        outcomes.append(_outcome(error, interp))
    return outcomes


def run_async(machine: Any, events: list[str]) -> list[Outcome]:
    """The same on the async Interpreter, awaiting each call."""

    async def main() -> list[Outcome]:
        interp = Interpreter(machine)
        outcomes = []
        error: BaseException | None = None
        try:
            await interp.start()
        except Exception as exc:
            error = exc
        outcomes.append(_outcome(error, interp))
        for event in events:
            error = None
            try:
                await interp.send(event)
            except Exception as exc:
                error = exc
            outcomes.append(_outcome(error, interp))
        return outcomes

    return asyncio.run(main())


@settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    chart=charts(),
    events=st.lists(st.sampled_from(EVENTS), min_size=1, max_size=8),
    bound=st.sampled_from([7, 250]),
)
def test_random_charts_end_alike_on_both_engines(
    chart: dict[str, Any], events: list[str], bound: int
) -> None:
    """Same outcome (error name, value, context) after every call on both engines."""
    try:
        machine = create_machine(chart, logic=LOGIC, max_iterations=bound)
    except XsmError:
        return
    assert run_sync(machine, events) == run_async(machine, events)
