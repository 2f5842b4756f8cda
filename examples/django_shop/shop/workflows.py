"""The order workflow: a saga reserve -> charge -> ship on Celery tasks, in the Django admin.

Each step is a Celery task the workflow dispatches after its step commits; the result comes
back as ``done.invoke``. When shipping fails, the charge is refunded and the stock released,
in that order. The charge step has a payment timeout: a charge that does not answer within
``SHOP_PAYMENT_TIMEOUT_MS`` counts as failed and the saga compensates (its late result is
ignored). Every instance is a row under **Xsm_Celery > Workflow instances**.

Files steer the fake services, like ``gateway_down`` does for ``charge_order``:
``payment_slow`` makes the charge hang past the timeout, ``courier_down`` fails shipping.
"""

from __future__ import annotations

import time
from typing import Any

from celery import shared_task
from django.conf import settings
from shop_project.celery import xsm

from xsm_celery import MachineLogic, create_machine
from xsm_celery.celery import celery_service
from xsm_celery.patterns import SagaBuilder


class CourierError(ConnectionError):
    """No courier took the parcel."""


def _flag(name: str) -> bool:
    return bool((settings.SHOP_FLAGS_DIR / name).exists())


@shared_task(name="shop.reserve_stock", acks_late=True)
def reserve_stock(order: dict[str, Any]) -> str:
    """Put the items aside."""
    return f"reserved {order.get('items', 1)} item(s) for {order.get('order_id')}"


@shared_task(name="shop.release_stock", acks_late=True)
def release_stock(order: dict[str, Any]) -> str:
    """Compensation: put the items back on the shelf."""
    return f"released stock of {order.get('order_id')}"


@shared_task(name="shop.charge_card", acks_late=True)
def charge_card(order: dict[str, Any]) -> str:
    """Charge the card; hangs while ``payment_slow`` exists (the payment timeout fires)."""
    if _flag("payment_slow"):
        time.sleep(settings.SHOP_PAYMENT_TIMEOUT_MS / 1000 + 2)
    return f"charged {order.get('amount_cents', 0)} cents"


@shared_task(name="shop.refund_card", acks_late=True)
def refund_card(order: dict[str, Any]) -> str:
    """Compensation: refund the charge."""
    return f"refunded {order.get('amount_cents', 0)} cents"


@shared_task(name="shop.ship_parcel", acks_late=True)
def ship_parcel(order: dict[str, Any]) -> str:
    """Hand the parcel to a courier; fails while ``courier_down`` exists."""
    if _flag("courier_down"):
        raise CourierError(f"no courier available for order {order.get('order_id')}")
    return f"shipped order {order.get('order_id')}"


SAGA = (
    SagaBuilder("fulfil", start_event="START")
    .step("reserve", invoke="reserveStock", compensate="releaseStock")
    .step(
        "charge",
        invoke="chargeCard",
        compensate="refundCard",
        timeout_ms=settings.SHOP_PAYMENT_TIMEOUT_MS,
    )
    .step("ship", invoke="shipParcel")
)


def _order(ctx: dict[str, Any], event: Any) -> list[Any]:
    """Every step gets the START payload (``context["input"]``)."""
    return [ctx.get("input") or {}]


_TASKS = {
    "reserveStock": reserve_stock,
    "releaseStock": release_stock,
    "chargeCard": charge_card,
    "refundCard": refund_card,
    "shipParcel": ship_parcel,
}

fulfilment = xsm.workflow(
    create_machine(
        SAGA.build(),
        logic=SAGA.logic().merge(
            MachineLogic(
                services={name: celery_service(task, args=_order) for name, task in _TASKS.items()}
            )
        ),
    ),
    store="django",
    name="fulfil",
    outbox_topic="shop-events",
)
