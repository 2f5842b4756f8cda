"""create_machine() refuses invalid charts with the path of the bad node."""

from __future__ import annotations

from typing import Any

import pytest

from tests.charts import NAMES, load, path
from xsm_celery import (
    ImplementationMissingError,
    InvalidConfigError,
    MachineLogic,
    StateNotFoundError,
    SyncInterpreter,
    create_machine,
)
from xsm_celery.engine import load_chart
from xsm_celery.errors import ChartError


def chart(**states: Any) -> dict[str, Any]:
    """A one-level chart whose first state is initial."""
    return {"id": "m", "initial": next(iter(states)), "states": states}


@pytest.mark.parametrize(
    ("config", "where"),
    [
        ({"initial": "a", "states": {"a": {}}}, "id"),
        ({"id": "", "initial": "a", "states": {"a": {}}}, "id"),
        ({"id": "m"}, ""),
        ({"id": "m", "states": []}, "states"),
        ({"id": "m", "context": [1], "states": {"a": {}}}, "context"),
        ({"id": "m", "initial": "zz", "states": {"a": {}}}, "initial"),
        (chart(a={"type": "weird"}), "states.a.type"),
        (chart(a={"type": "parallel"}), "states.a.type"),
        (chart(a={"type": "final", "states": {"b": {}}}), "states.a.type"),
        (chart(a={"type": "final", "on": {"E": "a"}}), "states.a.on"),
        (chart(a={"on": ["E"]}), "states.a.on"),
        (chart(a={"on": {"E": 5}}), "states.a.on.E"),
        (chart(a={"on": {"E": [{"target": "a"}, 3]}}), "states.a.on.E[1]"),
        (chart(a={"on": {"E": {"target": 3}}}), "states.a.on.E.target"),
        (chart(a={"on": {"E": {"target": "a", "reenter": "yes"}}}), "states.a.on.E.reenter"),
        (chart(a={"entry": [{"params": {}}]}), "states.a.entry[0]"),
        (chart(a={"on": {"E": {"guard": 7}}}), "states.a.on.E.guard"),
        (chart(a={"after": {"-5": "a"}}), "states.a.after.-5"),
        (chart(a={"after": {"nan": "a"}}), "states.a.after.nan"),
        (chart(a={"after": ["a"]}), "states.a.after"),
        (chart(a={"invoke": {}}), "states.a.invoke.src"),
        (chart(a={"invoke": {"src": "s", "id": ""}}), "states.a.invoke"),
        (chart(a={"tags": "x", "meta": 3}), "states.a.meta"),
        (chart(a={"tags": [1]}), "states.a.tags"),
        (chart(a={"onDone": "a"}), "states.a.onDone"),
        (chart(a={"id": "q"}, b={"id": "q"}), "states.b.id"),
        (chart(a={"id": "x.y"}), "states.a.id"),
        (chart(**{"a.b": {}}), "states.a.b"),
        (chart(a={"initial": "b"}), "states.a.initial"),
        (chart(a="atomic"), "states.a"),
    ],
)
def test_invalid_chart_is_refused_with_its_path(config: dict[str, Any], where: str) -> None:
    """Each malformed node raises InvalidConfigError whose path names that node."""
    with pytest.raises(InvalidConfigError) as caught:
        create_machine(config)
    assert caught.value.path == where
    assert isinstance(caught.value, ChartError)
    if where:
        assert str(caught.value).startswith(f"{where}: ")


def test_unknown_target_names_the_transition() -> None:
    """A target that resolves to nothing raises StateNotFoundError with the transition path."""
    with pytest.raises(StateNotFoundError) as caught:
        create_machine(chart(a={"on": {"GO": "nowhere"}}))
    assert caught.value.target == "nowhere"
    assert caught.value.path == "states.a.on.GO"
    assert caught.value.reference_id == "m.a"


def test_unknown_custom_id_target_is_refused() -> None:
    """A '#id' target with no such id is refused at create time."""
    with pytest.raises(StateNotFoundError):
        create_machine(chart(a={"on": {"GO": "#ghost"}}))


@pytest.mark.parametrize(
    ("a", "where"),
    [
        (
            {"states": {"b": {}, "h": {"type": "history", "states": {"x": {}}}}},
            "states.a.states.h.states",
        ),
        ({"states": {"b": {}, "h": {"type": "history", "on": {"E": "b"}}}}, "states.a.states.h.on"),
        (
            {"states": {"b": {}, "h": {"type": "history", "history": "wide"}}},
            "states.a.states.h.history",
        ),
        ({"initial": "h", "states": {"b": {}, "h": {"type": "history"}}}, "states.a.initial"),
        ({"states": {"h": {"type": "history"}}}, "states.a.states"),
        (
            {"states": {"b": {}, "h": {"type": "history", "target": "#m"}}},
            "states.a.states.h.target",
        ),
    ],
)
def test_malformed_history_states_are_refused_with_their_path(
    a: dict[str, Any], where: str
) -> None:
    """A history state with children, transitions, a bad kind, as initial, alone, or defaulting outside is refused."""
    with pytest.raises(InvalidConfigError) as caught:
        create_machine(chart(a=a, z={}))
    assert caught.value.path == where


def test_unknown_keys_are_ignored_unless_strict() -> None:
    """Unknown keys pass by default and are refused, with their path, under strict_config."""
    config = chart(a={"on": {"E": {"target": "a", "tragte": "b"}}, "colour": "red"})
    create_machine(config)
    with pytest.raises(InvalidConfigError) as caught:
        create_machine(config, strict_config=True)
    assert caught.value.path == "states.a.colour"


def test_strict_mode_allows_x_prefixed_and_meta_keys() -> None:
    """Tooling keys (x-...) and meta are always allowed, even under strict_config."""
    config = chart(a={"x-layout": {"x": 1}, "meta": {"doc": "ok"}, "description": "A"})
    assert create_machine(config, strict_config=True).get_state("a").meta == {"doc": "ok"}


def test_strict_mode_checks_transition_and_invoke_keys() -> None:
    """Misspelled keys inside transitions and invokes are found too."""
    with pytest.raises(InvalidConfigError) as caught:
        create_machine(chart(a={"on": {"E": {"tagret": "a"}}}), strict_config=True)
    assert caught.value.path == "states.a.on.E.tagret"
    with pytest.raises(InvalidConfigError) as caught:
        create_machine(chart(a={"invoke": {"src": "s", "onDon": "a"}}), strict_config=True)
    assert caught.value.path == "states.a.invoke.onDon"


@pytest.mark.parametrize(
    ("config", "kind", "name", "where"),
    [
        (chart(a={"entry": "hello"}), "action", "hello", "states.a.entry"),
        (chart(a={"exit": ["x", "bye"]}), "action", "x", "states.a.exit[0]"),
        (
            chart(a={"on": {"E": {"actions": {"type": "t"}}}}),
            "action",
            "t",
            "states.a.on.E.actions",
        ),
        (
            chart(a={"on": {"E": {"target": "a", "guard": "ok"}}}),
            "guard",
            "ok",
            "states.a.on.E.guard",
        ),
        (
            chart(a={"on": {"E": {"target": "a", "cond": "ok"}}}),
            "guard",
            "ok",
            "states.a.on.E.cond",
        ),
        (chart(a={"invoke": {"src": "work"}}), "service", "work", "states.a.invoke"),
        (chart(a={"after": {"retryDelay": "a"}}), "delay", "retryDelay", "states.a.after"),
    ],
)
def test_missing_implementation_is_refused_under_strict_config(
    config: dict[str, Any], kind: str, name: str, where: str
) -> None:
    """With strict_config and a MachineLogic, a name it lacks is refused at create time."""
    create_machine(config, logic=MachineLogic())
    with pytest.raises(ImplementationMissingError) as caught:
        create_machine(config, logic=MachineLogic(), strict_config=True)
    assert (caught.value.kind, caught.value.name, caught.value.path) == (kind, name, where)
    assert f"MachineLogic({kind}s=" in str(caught.value)


def test_strict_config_lists_every_missing_name_with_its_path() -> None:
    """One strict refusal names every missing action, guard, service and delay."""
    config = chart(
        a={"entry": "hello", "on": {"E": {"target": "b", "guard": "ok"}}},
        b={"invoke": {"src": "work"}, "after": {"later": "a"}},
    )
    with pytest.raises(ImplementationMissingError) as caught:
        create_machine(config, logic=MachineLogic(), strict_config=True)
    assert caught.value.missing == (
        ("action", "hello", "states.a.entry"),
        ("guard", "ok", "states.a.on.E.guard"),
        ("service", "work", "states.b.invoke"),
        ("delay", "later", "states.b.after"),
    )
    assert "4 implementations are missing" in str(caught.value)
    assert "states.b.after: delay 'later'" in str(caught.value)


def test_without_logic_names_are_not_checked() -> None:
    """Without logic the chart is still a machine: it can be inspected, hashed and drawn."""
    machine = create_machine(load("retry"))
    assert machine.get_state("retrying").after[0].delay_name == "retryDelay"
    assert machine.structure_hash


@pytest.mark.parametrize(
    ("a", "kind"),
    [
        ({"on": {"E": {"target": "b", "actions": "nope"}}}, "action"),
        ({"on": {"E": {"target": "b", "guard": "nope"}}}, "guard"),
        ({"on": {"E": "c"}}, "service"),
        ({"on": {"E": "d"}}, "delay"),
        ({"exit": "nope", "on": {"E": "b"}}, "action"),
    ],
)
def test_a_missing_piece_raises_when_first_needed_and_changes_nothing(
    a: dict[str, Any], kind: str
) -> None:
    """Incomplete logic builds; the send that needs the missing name raises it, state unchanged."""
    config = chart(a=a, b={}, c={"invoke": {"src": "nope"}}, d={"after": {"nope": "a"}})
    machine = create_machine(config, logic=MachineLogic())
    interp = SyncInterpreter(machine).start()
    with pytest.raises(ImplementationMissingError) as caught:
        interp.send("E")
    assert (caught.value.kind, caught.value.name) == (kind, "nope")
    assert interp.value == "a"
    assert interp.status == "running"


def test_missing_piece_in_the_initial_states_raises_from_start() -> None:
    """An entry action of the initial state that the logic lacks raises from start()."""
    machine = create_machine(chart(a={"entry": "nope"}), logic=MachineLogic())
    with pytest.raises(ImplementationMissingError):
        SyncInterpreter(machine).start()


def test_compound_without_initial_enters_its_first_child() -> None:
    """A compound state with no 'initial' enters its first child, as SCXML does."""
    machine = create_machine({"id": "m", "states": {"a": {}, "b": {}}})
    assert SyncInterpreter(machine).start().value == "a"


@pytest.mark.parametrize("name", NAMES)
def test_fixture_charts_are_valid_and_strict_clean(name: str) -> None:
    """Every fixture chart passes strict validation."""
    assert create_machine(load(name), strict_config=True).id == load(name)["id"]


def test_chart_loads_from_a_json_file() -> None:
    """create_machine accepts a path to a JSON chart file."""
    machine = create_machine(path("toggle"))
    assert machine.id == "toggle"


def test_unreadable_or_non_object_chart_file_is_refused(tmp_path: Any) -> None:
    """A missing file, broken JSON or a JSON array is an InvalidConfigError."""
    with pytest.raises(InvalidConfigError, match="cannot read"):
        load_chart(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidConfigError, match="not valid JSON"):
        load_chart(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(InvalidConfigError, match="JSON object"):
        load_chart(bad)


def test_chart_loads_from_the_charts_package() -> None:
    """'pkg:<file>' reads a chart shipped in xsm_celery.charts."""
    from importlib import resources

    shipped = sorted(
        p.name for p in resources.files("xsm_celery.charts").iterdir() if p.name.endswith(".json")
    )
    if not shipped:
        pytest.skip("no chart is shipped in xsm_celery.charts yet")
    assert create_machine(f"pkg:{shipped[0]}").id


def test_logic_must_be_machine_logic() -> None:
    """Passing a dict as logic is a TypeError that names the expected type."""
    with pytest.raises(TypeError, match="MachineLogic"):
        create_machine(chart(a={}), logic={"actions": {}})  # type: ignore[arg-type]


def test_machine_logic_refuses_non_callables() -> None:
    """MachineLogic checks its values at construction, not at the first event."""
    with pytest.raises(TypeError, match="'a'"):
        MachineLogic(actions={"a": "not callable"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="'d'"):
        MachineLogic(delays={"d": "soon"})


def test_machine_logic_merge_later_wins_and_leaves_operands_alone() -> None:
    """merge() returns a new logic where the later operand wins on a clash."""

    def first(*a: Any) -> None: ...

    def second(*a: Any) -> None: ...

    base = MachineLogic(actions={"a": first}, delays={"d": 1})
    top = MachineLogic(actions={"a": second}, guards={"g": lambda c, e: True})
    merged = base.merge(top)
    assert merged.actions["a"] is second
    assert "g" in merged.guards
    assert merged.delays["d"] == 1
    assert base.actions["a"] is first
    assert "g" not in base.guards


def test_machine_is_immutable() -> None:
    """Attributes of a built machine cannot be reassigned."""
    machine = create_machine(load("toggle"))
    with pytest.raises(AttributeError):
        machine.version = "2"  # type: ignore[misc]


def test_machine_exposes_its_nodes() -> None:
    """Machine.get_state finds nodes by full id, relative path or #custom id."""
    machine = create_machine(load("player"))
    node = machine.get_state("player.active.paused")
    assert (node.id, node.key, node.type, node.parent.id) == (  # type: ignore[union-attr]
        "player.active.paused",
        "paused",
        "atomic",
        "player.active",
    )
    assert machine.get_state("active.paused") is node
    assert machine.get_state("#off").type == "final"
    assert machine.get_state("active.playing").tags == frozenset({"audible"})
    assert [n.id for n in machine.iter_states()][:2] == ["player", "player.stopped"]
    with pytest.raises(StateNotFoundError):
        machine.get_state("active.rewinding")


def test_machine_version_and_config_are_exposed() -> None:
    """version comes from the chart's 'version' key; config is the chart dict."""
    config = load("toggle")
    config["version"] = 3
    machine = create_machine(config)
    assert machine.version == "3"
    assert machine.config["id"] == "toggle"
    assert create_machine(load("toggle")).version is None


def test_machine_config_is_a_copy() -> None:
    """Mutating the caller's dict after create_machine changes nothing in the machine."""
    config = load("toggle")
    machine = create_machine(config, logic=MachineLogic(actions={"count": lambda *a: None}))
    config["states"]["off"]["on"]["FLIP"] = "off"
    interp = SyncInterpreter(machine, clock=None).start()
    interp.send("FLIP")
    assert interp.value == "on"


def test_require_complete_refuses_what_create_machine_allowed() -> None:
    """machine.missing lists the gaps; require_complete() raises them, a complete machine passes."""
    machine = create_machine(chart(a={"entry": "hello"}), logic=MachineLogic())
    assert machine.missing == (("action", "hello", "states.a.entry"),)
    with pytest.raises(ImplementationMissingError, match="unknown action 'hello'"):
        machine.require_complete()
    create_machine(
        chart(a={"entry": "hello"}), logic=MachineLogic(actions={"hello": lambda *a: None})
    ).require_complete()
