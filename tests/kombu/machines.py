"""Charts the kombu and Celery consumer tests drive: a recorder and a poison step."""

from __future__ import annotations

from typing import Any

from xsm_celery import MachineLogic, create_machine
from xsm_celery.engine import Machine

#: The CloudEvents type both charts consume.
STEP_TYPE = "xsm.ledger.STEP"


def _record(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["seen"] = [*ctx.get("seen", []), event.payload.get("n")]


def recorder() -> Machine:
    """A ledger that appends each STEP's ``n`` to ``context.seen``."""
    return create_machine(
        {
            "id": "ledger",
            "initial": "open",
            "context": {"seen": []},
            "states": {"open": {"on": {"STEP": {"actions": "record"}}}},
        },
        logic=MachineLogic(actions={"record": _record}),
    )


def poison(calls: list[int]) -> Machine:
    """A ledger whose STEP action always raises; ``calls`` counts the attempts."""

    def explode(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        calls.append(1)
        raise RuntimeError("ledger backend rejected the entry")

    return create_machine(
        {
            "id": "ledger",
            "initial": "open",
            "context": {"seen": []},
            "states": {"open": {"on": {"STEP": {"actions": "explode"}}}},
        },
        logic=MachineLogic(actions={"explode": explode}),
    )


def seen(store: Any, key: str) -> list[int]:
    """The ``n`` values the instance ``key`` recorded, in processing order."""
    import json

    record = store.load(key)
    if record is None:
        return []
    snapshot = json.loads(record.snapshot)
    return list(snapshot.get("context", {}).get("seen", []))
