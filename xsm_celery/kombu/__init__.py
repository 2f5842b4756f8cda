"""Broker adapters over kombu: Redis, RabbitMQ and every other kombu transport.

``KombuBrokerAdapter`` implements ``xsm_celery.eda.SyncBrokerAdapter`` (and the batched
``publish_many`` the outbox relay uses), so the dispatcher and the relay run over any
broker a Celery app already talks to. Install with ``pip install "xsm-celery[celery]"``.
"""

from __future__ import annotations

from xsm_celery import errors as _errors

try:
    import kombu  # noqa: F401
except ImportError as exc:
    raise _errors.MissingExtraError(extra="celery", module="kombu") from exc

from xsm_celery.kombu.adapter import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_DRAIN_GRACE_S,
    DEFAULT_PREFETCH,
    DEFAULT_RETRIES,
    KombuBrokerAdapter,
)
from xsm_celery.kombu.loop import consume_forever
from xsm_celery.kombu.partitions import Partitioning, partition_of, queue_name
from xsm_celery.kombu.wire import CONTENT_TYPE, broker_attempts

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_DRAIN_GRACE_S",
    "DEFAULT_PREFETCH",
    "DEFAULT_RETRIES",
    "KombuBrokerAdapter",
    "Partitioning",
    "broker_attempts",
    "consume_forever",
    "partition_of",
    "queue_name",
]
