"""The order chart the workflow tests run, with logic that records what it did."""

from __future__ import annotations

import copy
from typing import Any

from xsm_celery.celery import celery_service
from xsm_celery.engine import Machine, MachineLogic, create_machine

ORDER_CHART: dict[str, Any] = {
    "id": "order",
    "initial": "created",
    "context": {"total": 0, "events": 0, "receipt": None, "error": None},
    "states": {
        "created": {
            "on": {
                "PAY": {
                    "target": "charging",
                    "actions": "remember_total",
                    "meta": {"publish": {"type": "order.pay_received", "data": ["total"]}},
                },
                "NOTE": {"actions": "count"},
                "BOOM": {"actions": "explode"},
                "SLOW": {"actions": "slow"},
                "CRASH": {"actions": "crash"},
            },
            "after": {"payment_timeout": "expired"},
        },
        "charging": {
            "invoke": {
                "id": "charge",
                "src": "charge",
                "onDone": {"target": "paid", "actions": "keep_receipt"},
                "onError": {"target": "failed", "actions": "keep_error"},
            },
            "on": {"CANCEL": "cancelled"},
        },
        "paid": {"on": {"SHIP": "shipped", "NOTE": {"actions": "count"}}},
        "shipped": {"type": "final"},
        "expired": {"type": "final"},
        "cancelled": {"type": "final"},
        "failed": {"on": {"RETRY": "charging"}},
    },
}


def remember_total(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Keep the amount to charge."""
    ctx["total"] = event.payload.get("total", 0)


def count(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Count NOTE events, so the tests can check each was applied exactly once."""
    ctx["events"] += 1


def explode_action(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """An action that always fails, so its step is rolled back and retried."""
    raise RuntimeError("the warehouse API is down")


def keep_receipt(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Store the charge task's return value."""
    ctx["receipt"] = event.data


def keep_error(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    """Store the failure the charge task reported."""
    ctx["error"] = getattr(event.data, "error_type", repr(event.data))


def order_machine(
    charge_task: Any,
    timeout_ms: float = 60_000,
    chart_id: str = "order",
    *,
    slow: Any = None,
    explode: Any = None,
    crash: Any = None,
) -> Machine:
    """The order chart with ``charge_task`` as its ``charge`` step.

    ``slow``, ``explode`` and ``crash`` replace the actions of SLOW, BOOM and CRASH.
    """
    chart = copy.deepcopy(ORDER_CHART)
    chart["id"] = chart_id
    return create_machine(
        chart,
        logic=MachineLogic(
            actions={
                "remember_total": remember_total,
                "count": count,
                "explode": explode_action if explode is None else explode,
                "keep_receipt": keep_receipt,
                "keep_error": keep_error,
                "slow": slow or count,
                "crash": crash or count,
            },
            services={
                "charge": celery_service(
                    charge_task, kwargs=lambda ctx, e: {"amount": ctx["total"]}
                )
            },
            delays={"payment_timeout": timeout_ms},
        ),
    )
