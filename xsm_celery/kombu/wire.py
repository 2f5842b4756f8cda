"""How an envelope travels as a kombu message, and what the broker says about redelivery.

The body is the CloudEvents structured-mode JSON (``Envelope.to_json``), so any consumer
that speaks CloudEvents can read it and the size cap is checked on both sides. The attempt
count stamped on a received envelope comes from the broker, never from the producer: an
``xsmattempt`` written by a producer (or a ``x-delivery-count`` header it set itself) could
dead-letter a healthy message on its first transient failure, or keep a poison one cycling.
"""

from __future__ import annotations

from typing import Any

from kombu import Exchange, Queue

from xsm_celery.eda import Envelope
from xsm_celery.eda.envelope import DEFAULT_MAX_ENVELOPE_BYTES

__all__ = [
    "AMQP_DRIVERS",
    "ANONYMOUS",
    "CONTENT_TYPE",
    "broker_attempts",
    "declare_queue",
    "decode_body",
    "publish_options",
    "stamp_attempt",
]

#: The content type of a CloudEvents structured-mode message.
CONTENT_TYPE = "application/cloudevents+json"
#: kombu driver types that speak AMQP 0-9-1 (RabbitMQ).
AMQP_DRIVERS = frozenset({"amqp", "librabbitmq"})
#: The anonymous (default) exchange: a routing key names the queue directly.
ANONYMOUS = Exchange("")
_PERSISTENT = 2


def publish_options() -> dict[str, Any]:
    """Return the ``Producer.publish`` keyword arguments shared by every envelope."""
    return {
        "content_type": CONTENT_TYPE,
        "content_encoding": "utf-8",
        "delivery_mode": _PERSISTENT,
        "exchange": ANONYMOUS,
    }


def declare_queue(
    name: str,
    driver_type: str,
    *,
    queue_type: str = "quorum",
    arguments: dict[str, Any] | None = None,
) -> Queue:
    """Return the kombu ``Queue`` for one partition, with the arguments its broker needs.

    On RabbitMQ the queue is durable, of ``queue_type`` (quorum queues count deliveries),
    and has a single active consumer, so several processes may consume every partition and
    the broker still hands each partition to one of them at a time. Other transports get a
    plain queue bound to the anonymous exchange. ``arguments`` adds RabbitMQ queue
    arguments (a dead-letter exchange, ``x-max-length``...); other transports ignore them.
    """
    if driver_type in AMQP_DRIVERS:
        merged: dict[str, Any] = {"x-single-active-consumer": True}
        if queue_type:
            merged["x-queue-type"] = queue_type
        merged.update(arguments or {})
        return Queue(
            name,
            exchange=ANONYMOUS,
            routing_key=name,
            durable=True,
            auto_delete=False,
            queue_arguments=merged,
        )
    return Queue(name, exchange=ANONYMOUS, routing_key=name)


def broker_attempts(message: Any, driver_type: str) -> int:
    """Return how many times the broker delivered ``message`` before (0 on a first delivery).

    RabbitMQ quorum queues count deliveries in ``x-delivery-count``; the header is only
    believed on a redelivery, because on a first delivery it is whatever the producer
    wrote. Brokers without a count (classic queues, Redis) only say "redelivered", which
    counts as one earlier delivery.
    """
    info = getattr(message, "delivery_info", None) or {}
    if not info.get("redelivered"):
        return 0
    if driver_type in AMQP_DRIVERS:
        count = (getattr(message, "headers", None) or {}).get("x-delivery-count")
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            return count
    return 1


def decode_body(message: Any, *, max_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES) -> Envelope:
    """Return the envelope a message carries; size is checked before parsing.

    Raises:
        EnvelopeCorruptError: the body is not a structured-mode CloudEvent.
        EnvelopeTooLargeError: the body is over ``max_bytes``.
    """
    return Envelope.from_json(message.body, max_bytes=max_bytes)


def stamp_attempt(envelope: Envelope, attempts: int) -> Envelope:
    """Return ``envelope`` carrying ``attempts`` as its attempt, whatever the producer said."""
    if envelope.attempt == attempts:
        return envelope
    return envelope.with_attempt(attempts)
