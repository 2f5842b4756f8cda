"""Target resolution, transition domains and entry sets, computed once per machine."""

from __future__ import annotations

from typing import Any

import pytest

from xsm_celery import create_machine
from xsm_celery.engine import Machine, Transition


def machine() -> Machine:
    """A chart with nesting, a parallel state and custom ids."""
    return create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {
                    "initial": "a1",
                    "on": {"IN": ".a2", "SELF": "a", "RE": {"target": "a", "reenter": True}},
                    "states": {"a1": {"on": {"SIB": "a2", "OUT": "#p2"}}, "a2": {}},
                },
                "p": {
                    "type": "parallel",
                    "on": {"R1": ".r1.y", "BOTH": [{"target": [".r1.y", ".r2.w"]}]},
                    "states": {
                        "r1": {"initial": "x", "states": {"x": {"on": {"CROSS": "#w"}}, "y": {}}},
                        "r2": {"initial": "v", "states": {"v": {}, "w": {"id": "w"}}},
                    },
                },
                "p2": {"id": "p2"},
            },
        }
    )


def trans(m: Machine, state: str, event: str) -> Transition:
    """The first transition ``state`` declares for ``event``."""
    return m.get_state(state).on[event][0]


@pytest.mark.parametrize(
    ("state", "event", "domain", "entry"),
    [
        ("a.a1", "SIB", "m.a", ["m.a.a2"]),
        ("a.a1", "OUT", "m", ["m.p2"]),
        ("a", "IN", "m.a", ["m.a.a2"]),
        ("a", "SELF", None, []),
        ("a", "RE", "m", ["m.a", "m.a.a1"]),
        ("p", "R1", "m.p.r1", ["m.p.r1.y"]),
        ("p", "BOTH", "m.p", ["m.p.r1", "m.p.r1.y", "m.p.r2", "m.p.r2.w"]),
        ("p.r1.x", "CROSS", "m.p", ["m.p.r1", "m.p.r1.x", "m.p.r2", "m.p.r2.w"]),
    ],
)
def test_domain_and_entry_set(state: str, event: str, domain: Any, entry: list[str]) -> None:
    """Each transition exits below its domain and enters exactly the listed states, in order."""
    t = trans(machine(), state, event)
    assert (t.domain.id if t.domain else None) == domain
    assert [s.id for s in t.entry] == entry


def test_leaf_handler_table_lists_own_then_ancestor_candidates() -> None:
    """A leaf's table holds its own candidates first, then its ancestors'."""
    m = machine()
    leaf = m.get_state("p.r1.x")
    assert [t.source.id for t in leaf.handlers["CROSS"]] == ["m.p.r1.x"]
    assert [t.source.id for t in leaf.handlers["R1"]] == ["m.p"]
    assert "R1" not in m.get_state("a.a1").handlers
