"""The flaky payment task: retried by a chart, dead-lettered when it gives up.

``charge_order`` calls a payment gateway that fails now and then (``SHOP_FLAKY_RATE``) and
always while the file ``gateway_down`` exists. The retry chart tries it four times with
exponential backoff and full jitter; when it gives up, the dead letter is a row in the
admin, from where an operator replays it once the gateway is back.
"""

from __future__ import annotations

import random

from celery import shared_task
from django.conf import settings
from django.db import transaction

from shop.models import Order
from xsm_celery.celery import ChartTask
from xsm_celery.django.stores import DjangoOutboxStore
from xsm_celery.eda import Envelope
from xsm_celery.patterns import RetryPolicy


class GatewayError(ConnectionError):
    """The payment gateway did not answer."""


def call_gateway(order: Order) -> str:
    """Pretend to charge the card; fail as the settings say."""
    if settings.SHOP_GATEWAY_DOWN_FILE.exists():
        raise GatewayError(f"payment gateway is down (charging order {order.pk})")
    if random.random() < settings.SHOP_FLAKY_RATE:
        raise GatewayError(f"payment gateway timed out (charging order {order.pk})")
    return f"ch_{order.pk:06d}"


@shared_task(
    base=ChartTask,
    name="shop.charge_order",
    retry_policy=RetryPolicy(max_attempts=4, base_ms=500, jitter="full"),
    give_up_on=(Order.DoesNotExist,),
)
def charge_order(order_id: int) -> str:
    """Charge an order; mark it paid and announce it in the same transaction."""
    order = Order.objects.get(pk=order_id)
    if order.status == Order.Status.PAID:
        return f"order {order_id} was already paid"
    charge_id = call_gateway(order)
    with transaction.atomic():
        order.status = Order.Status.PAID
        order.save(update_fields=["status"])
        DjangoOutboxStore().add(
            "shop-events",
            Envelope.new(
                type="shop.order.paid",
                subject=f"order-{order_id}",
                data={
                    "order_id": order_id,
                    "charge": charge_id,
                    "amount_cents": order.amount_cents,
                },
            ),
        )
    return charge_id
