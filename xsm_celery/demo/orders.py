"""The demo's durable workflow: an order chart whose payment step is a Celery task.

Each order is a persisted instance keyed by its id (SQLite in the demo folder). ``PAY``
arrives as a Celery task message, the step commits, and only then is the ``charge_card``
task sent; its result comes back to the same instance as ``done.invoke.charge``. An order
nobody pays expires when its ``payment_timeout`` fires: a countdown task on the worker, with
no process holding the instance in between.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from xsm_celery.celery import Workflow, Xsm, celery_service
from xsm_celery.engine import MachineLogic, create_machine

__all__ = ["ORDER_CHART", "PAYMENT_TIMEOUT_MS", "make_orders"]

#: How long an order waits for its payment before it expires.
PAYMENT_TIMEOUT_MS = 1_500

ORDER_CHART: dict[str, Any] = {
    "id": "order",
    "initial": "awaiting_payment",
    "context": {"total": 0, "receipt": None},
    "states": {
        "awaiting_payment": {
            "on": {"PAY": {"target": "charging", "actions": "remember_total"}},
            "after": {"payment_timeout": "expired"},
        },
        "charging": {
            "invoke": {
                "id": "charge",
                "src": "charge",
                "onDone": {"target": "paid", "actions": "keep_receipt"},
                "onError": "payment_failed",
            },
        },
        "paid": {"type": "final"},
        "payment_failed": {"type": "final"},
        "expired": {"type": "final"},
    },
}


def _remember_total(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["total"] = event.payload["total"]


def _keep_receipt(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["receipt"] = event.data


def make_orders(app: Celery) -> Workflow:
    """Register the ``charge_card`` task and the order workflow on ``app``."""

    @app.task(name="xsm_demo.charge_card", acks_late=True)
    def charge_card(total: float) -> str:
        """The payment provider: answers with a receipt number."""
        return f"R-{int(total * 100)}"

    machine = create_machine(
        ORDER_CHART,
        logic=MachineLogic(
            actions={"remember_total": _remember_total, "keep_receipt": _keep_receipt},
            services={"charge": celery_service(charge_card, args=lambda ctx, e: [ctx["total"]])},
            delays={"payment_timeout": PAYMENT_TIMEOUT_MS},
        ),
    )
    orders: Workflow = Xsm(app).workflow(machine, name="orders")
    return orders
