"""Machines in every situation a snapshot records, for the round trip through another process.

``test_snapshot_compat.test_round_trip_in_another_process`` drives each case here, saves it,
and runs this module as a script in a fresh interpreter: the script restores every snapshot
on both engines and prints what it sees (:func:`observe`), now and after the clock moves on.
Both processes build the machines from this one module, so they agree on the charts.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from xsm_celery import Interpreter, MachineLogic, SimulatedClock, SyncInterpreter, create_machine
from xsm_celery.engine import Machine

#: Wall clock (epoch seconds) at which every case is driven and every restore happens.
WALL = 1_700_000_000.0

#: How far the clock moves after the restore, so every pending timer fires.
LATER_MS = 10_000

KID = {
    "id": "kid",
    "initial": "small",
    "context": {"age": 1},
    "states": {
        "small": {
            "after": {"3000": "big"},
            "on": {"GROW": {"actions": [{"type": "assign", "params": {"assignment": {"age": 2}}}]}},
        },
        "big": {"type": "final", "output": {"grown": True}},
    },
}

JOB = {
    "id": "job",
    "initial": "idle",
    "context": {"tries": 0, "tags": ["a", "é"], "nested": {"k": [1, 2.5, None, True]}},
    "states": {
        "idle": {
            "on": {
                "GO": {
                    "target": "work",
                    "actions": [{"type": "assign", "params": {"assignment": {"tries": 1}}}],
                },
                "HIRE": "hiring",
                "PAY": "paid",
            }
        },
        "work": {
            "initial": "fetch",
            "after": {"5000": "idle"},
            "on": {"PAUSE": "paused"},
            "states": {
                "fetch": {"on": {"NEXT": "parse"}},
                "parse": {
                    "initial": "head",
                    "states": {
                        "head": {"on": {"MORE": "body"}},
                        "body": {"after": {"700": "head"}},
                    },
                },
                "hist": {"type": "history", "history": "deep"},
            },
        },
        "paused": {
            "entry": [
                {"type": "raise", "params": {"event": "RESUME", "delay": 4000, "id": "wake"}}
            ],
            "on": {"RESUME": "work.hist"},
        },
        "hiring": {
            "invoke": {"id": "kid", "src": "kid", "onDone": "idle"},
            "entry": [{"type": "sendTo", "params": {"to": "kid", "event": "GROW", "delay": 1500}}],
        },
        "paid": {"type": "final", "output": {"ok": 1}},
    },
}

DESK = {
    "id": "desk",
    "type": "parallel",
    "states": {
        "light": {"initial": "dim", "states": {"dim": {"after": {"1200": "bright"}}, "bright": {}}},
        "fan": {"initial": "slow", "states": {"slow": {"after": {"2500": "fast"}}, "fast": {}}},
    },
}


def machine(name: str) -> Machine:
    """The machine a case runs (the same in both processes)."""
    if name.startswith("desk"):
        return create_machine(DESK)
    return create_machine(JOB, MachineLogic(services={"kid": create_machine(KID)}))


#: Case name -> the events sent after start (None: never started; "stop": stopped after).
CASES: dict[str, list[str] | None] = {
    "not_started": None,
    "idle": [],
    "work_timers": ["GO", "NEXT", "MORE"],
    "paused_history_delayed_raise": ["GO", "NEXT", "MORE", "PAUSE"],
    "child_with_timer_and_delayed_send": ["HIRE"],
    "done_with_output": ["PAY"],
    "stopped": ["GO", "stop"],
    "desk_parallel_timers": [],
}


def observe(interp: Any) -> dict[str, Any]:
    """What a restore must reproduce: state, context, output, timers, history, children."""
    now = interp.clock.now()
    return {
        "status": interp.status,
        "state_ids": sorted(interp.current_state_ids),
        "context": interp.context,
        "output": interp.output,
        "timers": sorted(
            [t.after.event_type, round(t.due - now, 3)] for t in interp.pending_timers()
        ),
        "delayed": sorted(
            [t.event.type, t.send_id, t.target, round(t.due - now, 3)]
            for t in interp._delayed
            if not t.cancelled
        ),
        "history": {h.id: [s.id for s in kept] for h, kept in interp._history.items()},
        "children": {k: observe(ref.child) for k, ref in sorted(interp.children.items())},
    }


def _restore_and_observe(kind: str, name: str, snapshot: str) -> list[dict[str, Any]]:
    clock = SimulatedClock(wall_start=WALL)
    if kind == "sync":
        interp: Any = SyncInterpreter.from_snapshot(snapshot, machine(name), clock=clock)
        seen = observe(interp)
        clock.increment(LATER_MS)
        return [seen, observe(interp)]

    async def run() -> list[dict[str, Any]]:
        interp = Interpreter.from_snapshot(snapshot, machine(name), clock=clock)
        seen = observe(interp)
        await clock.increment(LATER_MS)
        return [seen, observe(interp)]

    return asyncio.run(run())


def main(read: Callable[[], str] = sys.stdin.read) -> None:
    """Restore each ``{name: snapshot}`` read from stdin on both engines; print observations."""
    snapshots: dict[str, str] = json.loads(read())
    report = {
        kind: {name: _restore_and_observe(kind, name, snap) for name, snap in snapshots.items()}
        for kind in ("sync", "async")
    }
    sys.stdout.write(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
