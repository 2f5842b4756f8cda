"""Compound, parallel and final states, and the done events that cascade between them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.charts import load
from tests.engine.drivers import Interp
from tests.engine.helpers import Recorder, note
from xsm_celery import MachineLogic, StateNotFoundError, create_machine


def started(config: dict[str, Any], **logic: Any) -> Any:
    """A started interpreter of ``config`` with ``note`` plus the given logic."""
    actions = {"note": note, **logic.pop("actions", {})}
    return Interp(create_machine(config, logic=MachineLogic(actions=actions, **logic))).start()


def say(text: str) -> dict[str, Any]:
    """A ``note`` action definition."""
    return {"type": "note", "params": {"text": text}}


def test_parallel_start_enters_every_region() -> None:
    """Starting a parallel root enters one state per region; value lists each region."""
    interp = started(load("editor"))
    assert interp.value == {"bold": "off", "list": "none", "save": "clean"}
    assert interp.current_state_ids == {"editor.bold.off", "editor.list.none", "editor.save.clean"}


def test_each_region_takes_its_own_transition() -> None:
    """One event moves every region that handles it, in the same step."""
    config = load("editor")
    config["states"]["save"]["states"]["clean"]["on"]["BULLETS"] = "dirty"
    interp = started(config)
    interp.send("BULLETS")
    assert interp.value == {"bold": "off", "list": "bullets", "save": "dirty"}


def test_regions_ignore_events_they_do_not_handle() -> None:
    """An event handled by one region leaves the others untouched."""
    interp = started(load("editor"))
    interp.send("TOGGLE_BOLD")
    interp.send("NUMBERS")
    assert interp.value == {"bold": "on", "list": "numbers", "save": "clean"}
    assert interp.tags == {"styled"}
    assert interp.has_tag("styled")
    assert not interp.has_tag("dead-letter")


def test_ancestor_handler_fires_once_for_many_regions() -> None:
    """A parallel state's own handler runs once even though every region's leaf reaches it."""
    config = {
        "id": "m",
        "initial": "p",
        "context": {"log": []},
        "states": {
            "p": {
                "type": "parallel",
                "on": {"PING": {"actions": say("ping")}},
                "states": {
                    "r1": {"initial": "a", "states": {"a": {}}},
                    "r2": {"initial": "b", "states": {"b": {}}},
                    "r3": {"initial": "c", "states": {"c": {}}},
                },
            }
        },
    }
    interp = started(config)
    interp.send("PING")
    assert interp.context["log"] == ["ping"]


def test_parallel_exit_order_is_deterministic() -> None:
    """Leaving a parallel state exits leaves in reverse document order, then regions, then it."""
    leaf = lambda name: {"exit": say(f"exit {name}")}  # noqa: E731
    config = {
        "id": "m",
        "initial": "p",
        "context": {"log": []},
        "states": {
            "p": {
                "type": "parallel",
                "exit": say("exit p"),
                "on": {"LEAVE": "out"},
                "states": {
                    "r1": {"initial": "a", "exit": say("exit r1"), "states": {"a": leaf("a")}},
                    "r2": {"initial": "b", "exit": say("exit r2"), "states": {"b": leaf("b")}},
                },
            },
            "out": {},
        },
    }
    interp = started(config)
    interp.send("LEAVE")
    assert interp.context["log"] == ["exit b", "exit r2", "exit a", "exit r1", "exit p"]


def test_parallel_entry_order_is_document_order() -> None:
    """Entering a parallel state runs entry actions parent first, regions in document order."""
    config = {
        "id": "m",
        "type": "parallel",
        "context": {"log": []},
        "states": {
            "r1": {"entry": say("r1"), "initial": "a", "states": {"a": {"entry": say("a")}}},
            "r2": {"entry": say("r2"), "initial": "b", "states": {"b": {"entry": say("b")}}},
        },
    }
    assert started(config).context["log"] == ["r1", "a", "r2", "b"]


def test_transition_inside_one_region_keeps_the_others() -> None:
    """A region-local transition does not exit or re-enter sibling regions."""
    config = {
        "id": "m",
        "type": "parallel",
        "context": {"log": []},
        "states": {
            "r1": {"initial": "a", "states": {"a": {"on": {"GO": "a2"}}, "a2": {}}},
            "r2": {
                "initial": "b",
                "states": {"b": {"exit": say("exit b"), "entry": say("enter b")}},
            },
        },
    }
    interp = started(config)
    interp.context["log"].clear()
    interp.send("GO")
    assert interp.context["log"] == []
    assert interp.value == {"r1": "a2", "r2": "b"}


def test_cross_region_target_resets_the_parallel_state() -> None:
    """Targeting another region's state re-enters every region of the parallel state."""
    config = {
        "id": "m",
        "type": "parallel",
        "states": {
            "r1": {"initial": "a", "states": {"a": {"on": {"JUMP": "#y"}}, "a2": {}}},
            "r2": {"initial": "x", "states": {"x": {}, "y": {"id": "y"}}},
        },
    }
    interp = started(config)
    interp.send("JUMP")
    assert interp.value == {"r1": "a", "r2": "y"}


def test_conflicting_sibling_regions_keep_the_earlier_one() -> None:
    """Two regions whose transitions exit the same states: document order decides."""
    config = {
        "id": "m",
        "initial": "p",
        "states": {
            "p": {
                "type": "parallel",
                "states": {
                    "r1": {"initial": "a", "states": {"a": {"on": {"GO": "a2"}}, "a2": {}}},
                    "r2": {"initial": "b", "states": {"b": {"on": {"GO": "#out"}}}},
                },
            },
            "out": {"id": "out"},
        },
    }
    interp = started(config)
    interp.send("GO")
    assert interp.value == {"p": {"r1": "a2", "r2": "b"}}


@pytest.mark.parametrize("handler_region", ["r1", "r2"])
def test_leaf_transition_beats_a_conflicting_ancestor_transition(handler_region: str) -> None:
    """A region leaf's own transition wins over its parallel ancestor's, whichever comes first."""
    other = "r2" if handler_region == "r1" else "r1"
    regions: dict[str, Any] = {
        handler_region: {"initial": "a", "states": {"a": {"on": {"GO": "a2"}}, "a2": {}}},
        other: {"initial": "b", "states": {"b": {}}},
    }
    config = {
        "id": "m",
        "initial": "p",
        "states": {
            "p": {"type": "parallel", "on": {"GO": "out"}, "states": dict(sorted(regions.items()))},
            "out": {},
        },
    }
    interp = started(config)
    interp.send("GO")
    assert interp.value == {"p": {handler_region: "a2", other: "b"}}


def test_parallel_state_is_done_when_every_region_is_final() -> None:
    """onDone of a parallel state fires only after all its regions reach final states."""
    interp = started(load("upload"))
    interp.send("FILE_OK")
    assert interp.status == "running"
    assert interp.context["log"] == ["file done"]
    interp.send("THUMB_OK")
    assert interp.context["log"] == ["file done", "thumb done", "all regions done"]
    assert interp.value == "finished"


def test_region_and_parallel_done_in_one_step() -> None:
    """Both regions finishing on one event raise each region's done, then the parallel's."""
    config = load("upload")
    config["states"]["working"]["states"]["file"]["states"]["sending"]["on"]["BOTH_OK"] = "sent"
    interp = started(config)
    interp.send("BOTH_OK")
    assert interp.context["log"] == ["file done", "thumb done", "all regions done"]
    assert interp.status == "done"


def test_top_level_final_ends_the_machine() -> None:
    """Reaching a final child of the root sets status done, records output and calls on_done."""
    recorder = Recorder()
    machine = create_machine(load("upload"), logic=MachineLogic(actions={"note": note}))
    interp = Interp(machine).use(recorder).start()
    interp.send("CANCEL")
    assert interp.status == "done"
    assert interp.output == {"ok": False}
    assert recorder.of("on_done") == [{"ok": False}]
    interp.send("FILE_OK")
    assert interp.value == "cancelled"


def test_done_cascade_through_nested_compounds() -> None:
    """A final deep inside raises done.state on its parent, whose onDone can finish the next."""
    config = {
        "id": "m",
        "initial": "outer",
        "context": {"log": []},
        "states": {
            "outer": {
                "initial": "inner",
                "onDone": {"target": "end", "actions": say("outer done")},
                "states": {
                    "inner": {
                        "initial": "work",
                        "onDone": {"target": "fin", "actions": say("inner done")},
                        "states": {"work": {"on": {"OK": "ok"}}, "ok": {"type": "final"}},
                    },
                    "fin": {"type": "final"},
                },
            },
            "end": {"type": "final"},
        },
    }
    interp = started(config)
    interp.send("OK")
    assert interp.context["log"] == ["inner done", "outer done"]
    assert interp.status == "done"


def test_nested_parallel_done_cascades() -> None:
    """A parallel inside a parallel region completes the region when all its regions end."""
    final_region = {"initial": "w", "states": {"w": {"on": {"END": "f"}}, "f": {"type": "final"}}}
    config = {
        "id": "m",
        "initial": "top",
        "states": {
            "top": {
                "type": "parallel",
                "onDone": "over",
                "states": {
                    "left": {"type": "parallel", "states": {"x": final_region, "y": final_region}},
                    "right": final_region,
                },
            },
            "over": {"type": "final"},
        },
    }
    interp = started(config)
    interp.send("END")
    assert interp.status == "done"
    assert interp.value == "over"


def test_final_state_data_reaches_on_done_event() -> None:
    """The final child's 'output' is the data of its parent's done.state event."""
    got: list[Any] = []
    config = {
        "id": "m",
        "initial": "c",
        "states": {
            "c": {
                "initial": "a",
                "onDone": {"target": "z", "actions": "grab"},
                "states": {"a": {"on": {"GO": "f"}}, "f": {"type": "final", "output": {"n": 1}}},
            },
            "z": {},
        },
    }
    interp = started(config, actions={"grab": lambda i, c, e, a: got.append((e.type, e.data))})
    interp.send("GO")
    assert got == [("done.state.m.c", {"n": 1})]


def test_matches_accepts_full_and_relative_ids() -> None:
    """matches() takes full ids, paths below the root and #ids, and checks ancestors too."""
    interp = started(load("upload"))
    assert interp.matches("upload.working.file.sending")
    assert interp.matches("working.file")
    assert interp.matches("working")
    assert not interp.matches("finished")


def test_matches_unknown_state_raises() -> None:
    """A typo in matches() raises StateNotFoundError instead of reading as False."""
    interp = started(load("upload"))
    with pytest.raises(StateNotFoundError):
        interp.matches("upload.wroking")


def test_value_shapes() -> None:
    """value is a key for a top-level leaf and a nested dict below compound states."""
    interp = started(load("upload"))
    assert interp.value == {"working": {"file": "sending", "thumb": "rendering"}}
    interp.send("CANCEL")
    assert interp.value == "cancelled"
