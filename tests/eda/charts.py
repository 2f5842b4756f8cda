"""Small machines the eda tests share."""

from __future__ import annotations

from typing import Any

from xsm_celery import MachineLogic, create_machine
from xsm_celery.engine import Machine


def _inc(i: Any, ctx: dict[str, Any], e: Any, a: Any) -> None:
    ctx["count"] += 1
    ctx.setdefault("seen", []).append(e.payload.get("n"))


def _boom(i: Any, ctx: dict[str, Any], e: Any, a: Any) -> None:
    raise RuntimeError("action exploded")


def counter() -> Machine:
    """``counter``: INC counts (and records payload n), FAIL's action raises, STOP is final."""
    return create_machine(
        {
            "id": "counter",
            "initial": "on",
            "context": {"count": 0},
            "states": {
                "on": {
                    "on": {
                        "INC": {
                            "actions": "inc",
                            "meta": {"publish": {"type": "counter.inc", "data": ["count"]}},
                        },
                        "FAIL": {"actions": "boom"},
                        "STOP": {"target": "done"},
                    }
                },
                "done": {"type": "final"},
            },
        },
        logic=MachineLogic(actions={"inc": _inc, "boom": _boom}),
    )


def order() -> Machine:
    """The seed's order chart: PAY sets total and publishes order.paid."""
    return create_machine(
        {
            "id": "order",
            "initial": "open",
            "context": {"total": 0},
            "states": {
                "open": {
                    "on": {
                        "PAY": {
                            "target": "paid",
                            "actions": "setTotal",
                            "meta": {"publish": {"type": "order.paid", "data": ["total"]}},
                        }
                    }
                },
                "paid": {"type": "final"},
            },
        },
        logic=MachineLogic(
            actions={"setTotal": lambda i, ctx, e, a: ctx.update(total=e.payload["total"])}
        ),
    )
