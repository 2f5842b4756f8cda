"""Hypothesis strategies for statecharts and the events sent to them.

``charts()`` draws valid charts with nested compound, parallel and final states, guarded
candidate lists, targetless and re-entering transitions, ``after`` timers, ``onDone`` and
actions (one of which raises). They contain no ``always`` transitions and no final state is
an initial one, so a correct engine never has a reason to report a runaway chain; that is
what lets the property tests demand that ``send()`` never raises.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from xsm_celery import MachineLogic

#: The event vocabulary of generated charts.
EVENTS = ("A", "B", "C", "D")


def chart_logic() -> MachineLogic:
    """The logic every generated chart uses."""

    def note(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        ctx["steps"] = ctx.get("steps", 0) + 1

    def boom(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        raise RuntimeError("generated action failure")

    return MachineLogic(
        actions={"note": note, "boom": boom},
        guards={"coin": lambda ctx, e: bool(e.payload.get("coin")), "never": lambda c, e: False},
    )


@st.composite
def _tree(draw: st.DrawFn, depth: int, counter: list[int], allow_final: bool) -> dict[str, Any]:
    counter[0] += 1
    sid = f"s{counter[0]}"
    kinds = ["atomic"]
    if depth > 0:
        kinds += ["compound", "compound", "parallel"]
    if allow_final:
        kinds.append("final")
    kind = draw(st.sampled_from(kinds))
    node: dict[str, Any] = {"id": sid}
    if kind == "final":
        node["type"] = "final"
        return node
    if kind in ("compound", "parallel"):
        size = draw(st.integers(1 if kind == "compound" else 2, 3))
        children = {}
        for index in range(size):
            final_ok = kind == "compound" and index > 0
            children[f"k{index}"] = draw(_tree(depth - 1, counter, final_ok))
        node["states"] = children
        if kind == "parallel":
            node["type"] = "parallel"
        else:
            node["initial"] = "k0"
    return node


def _all_ids(node: dict[str, Any], into: list[str]) -> list[str]:
    into.append(node["id"])
    for child in node.get("states", {}).values():
        _all_ids(child, into)
    return into


def _final_ids(node: dict[str, Any], into: set[str]) -> set[str]:
    if node.get("type") == "final":
        into.add(node["id"])
    for child in node.get("states", {}).values():
        _final_ids(child, into)
    return into


@st.composite
def _transition(draw: st.DrawFn, targets: list[str], done: bool) -> dict[str, Any]:
    trans: dict[str, Any] = {}
    if targets and draw(st.integers(0, 3)) > 0:
        trans["target"] = f"#{draw(st.sampled_from(targets))}"
    if not done and draw(st.integers(0, 3)) == 0:
        trans["reenter"] = True
    guard = draw(st.sampled_from([None, None, "coin", "never"]))
    if guard:
        trans["guard"] = guard
    actions = draw(st.lists(st.sampled_from(["note", "note", "boom"]), max_size=2))
    if actions:
        trans["actions"] = actions
    return trans


def _decorate(draw: st.DrawFn, node: dict[str, Any], ids: list[str], finals: set[str]) -> None:
    """Add transitions, timers, onDone and actions to a generated tree, in place."""
    if node.get("type") != "final":
        events = draw(st.lists(st.sampled_from(EVENTS), max_size=3, unique=True))
        node["on"] = {
            event: draw(st.lists(_transition(ids, done=False), min_size=1, max_size=2))
            for event in events
        }
        if draw(st.integers(0, 4)) == 0:
            delay = draw(st.sampled_from(["50", "100", "250"]))
            node["after"] = {delay: draw(_transition(ids, done=False))}
    if "states" in node and draw(st.booleans()):
        non_final = [i for i in ids if i not in finals]
        node["onDone"] = draw(_transition(non_final, done=True))
    if draw(st.integers(0, 3)) == 0:
        node["entry"] = draw(st.sampled_from(["note", "boom"]))
    if draw(st.integers(0, 3)) == 0:
        node["exit"] = draw(st.sampled_from(["note", "boom"]))
    for child in node.get("states", {}).values():
        _decorate(draw, child, ids, finals)


@st.composite
def charts(draw: st.DrawFn, max_depth: int = 3) -> dict[str, Any]:
    """A valid chart dict (root id ``gen``) drawn from nested states and transitions."""
    counter = [0]
    root = draw(_tree(max_depth, counter, False).filter(lambda n: "states" in n))
    root.pop("id")
    ids = [i for i in _all_ids({"id": "", **root}, []) if i]
    finals = _final_ids(root, set())
    _decorate(draw, root, ids, finals)
    root.pop("entry", None)
    root.pop("exit", None)
    return {"id": "gen", "context": {}, **root}


def events(vocabulary: tuple[str, ...] = EVENTS) -> st.SearchStrategy[list[tuple[str, bool]]]:
    """Event sequences: (type, coin) pairs; ``coin`` feeds the generated guards."""
    return st.lists(st.tuples(st.sampled_from(vocabulary), st.booleans()), max_size=25)


def clock_steps() -> st.SearchStrategy[list[int]]:
    """Clock increments (ms) interleaved with events in the timer property."""
    return st.lists(st.sampled_from([0, 10, 50, 100, 1000]), max_size=25)
