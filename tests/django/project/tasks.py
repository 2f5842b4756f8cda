"""The test project's chart task: a payment that fails while the gateway is marked broken.

The flag lives in Redis, so the test process can break and fix the gateway that a worker
sees: the task is dead-lettered while it is broken, and a replay succeeds once fixed.
"""

from __future__ import annotations

from celery import shared_task

from tests.services import REDIS_URL
from xsm_celery.celery import ChartTask
from xsm_celery.patterns import RetryPolicy

#: Redis key that, while present, makes ``charge`` fail.
BROKEN_KEY = "xsm-django-tests:gateway-broken"


def gateway_broken() -> bool:
    """Whether the test marked the payment gateway broken."""
    import redis

    return bool(redis.Redis.from_url(REDIS_URL).exists(BROKEN_KEY))


@shared_task(
    base=ChartTask,
    name="shop.charge",
    retry_policy=RetryPolicy(max_attempts=2, base_ms=50, jitter="none"),
)
def charge(order_id: int, amount: int) -> str:
    """Charge an order; raises while the gateway is broken."""
    if gateway_broken():
        raise ConnectionError(f"payment gateway unreachable for order {order_id}")
    return f"charged order {order_id}: {amount}"
