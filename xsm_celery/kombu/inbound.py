"""Received kombu messages turned into ``Delivery`` objects, per topic and in order.

``KombuBrokerAdapter`` (which drains its own connection) and the Celery consumer step
(whose messages arrive through the worker's event loop) both hand messages to an
``Inbound``; it decodes each body, stamps the broker's delivery count as the envelope's
attempt, and wires ``ack`` / ``nack`` so that a requeue stays here at the head of its
subject (see ``subscription``). ``generation`` changes when the connection the messages
came on is gone: their deliveries can no longer be settled, and the broker redelivers them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from xsm_celery.eda import Delivery
from xsm_celery.eda.envelope import DEFAULT_MAX_ENVELOPE_BYTES
from xsm_celery.errors import EnvelopeError
from xsm_celery.kombu.subscription import Held, Subscription
from xsm_celery.kombu.undecodable import UndecodableHandler
from xsm_celery.kombu.wire import broker_attempts, decode_body, stamp_attempt

__all__ = ["Inbound", "return_to_head", "settle_message"]

logger = logging.getLogger(__name__)

#: ``(held, "ack" | "reject") -> None``: settle a message at the broker.
Settle = Callable[[Held, str], None]


def settle_message(held: Held, how: str, errors: tuple[type[BaseException], ...] = ()) -> None:
    """Acknowledge or reject (without requeue) one message; a lost connection is logged.

    The broker still holds a message it never heard back about and delivers it again, so
    a failed settlement is a duplicate later, never a loss.
    """
    try:
        if how == "ack":
            held.message.ack()
        else:
            held.message.reject(requeue=False)
    except errors as exc:
        logger.warning("could not %s a message (%s); the broker will deliver it again", how, exc)


def return_to_head(pending: list[Held], driver_type: str) -> None:
    """Give unsettled messages back to the broker so that the oldest is delivered next.

    Redis restores to the head only through its QoS (``leftmost=False`` pushes on the
    consuming end), newest first so the oldest ends on top. AMQP brokers need nothing:
    closing the channel returns its unacknowledged messages to their places, whereas an
    explicit reject would send them to the tail of a quorum queue.
    """
    if driver_type != "redis":
        return
    for held in reversed(pending):
        qos: Any = getattr(held.message.channel, "qos", None)
        if hasattr(qos, "restore_by_tag"):
            qos.restore_by_tag(held.message.delivery_tag, leftmost=False)
            qos.ack(held.message.delivery_tag)


class Inbound:
    """The subscriptions of one consumer and the deliveries built from their messages.

    Args:
        driver_type: The kombu transport's driver type (``redis``, ``amqp``...).
        settle: How a message is acknowledged or rejected (the adapter adds its lock).
        max_bytes: Envelope size cap, checked before parsing.
        dead_letters: Where undecodable messages go; without one they are delivered raw.
    """

    def __init__(
        self,
        driver_type: str,
        settle: Settle,
        *,
        max_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
        dead_letters: Any = None,
    ) -> None:
        self.driver_type = driver_type
        self.max_bytes = int(max_bytes)
        self.generation = 0
        self.subs: dict[str, Subscription] = {}
        self._settle = settle
        self._undecodable = UndecodableHandler(dead_letters)

    def open(self, topic: str, queues: list[str]) -> Subscription:
        """Return the subscription of ``topic``, creating it (without a consumer) if new."""
        sub = self.subs.get(topic)
        if sub is None:
            sub = self.subs[topic] = Subscription(topic, queues)
        return sub

    def receiver(self, sub: Subscription) -> Callable[[Any], None]:
        """The ``on_message`` callback of ``sub``'s consumer on the current connection."""
        generation = self.generation

        def on_message(message: Any) -> None:
            sub.receive(message, generation)

        return on_message

    def reset(self) -> None:
        """Forget every held message: the connection they came on is gone."""
        self.generation += 1
        for sub in self.subs.values():
            sub.drop_all()
            sub.consumer = None

    def close(self, *topics: str) -> None:
        """Stop ``topics`` (every topic without arguments): messages go back, oldest first.

        Consumers are cancelled before anything is returned, so a returned message is not
        handed straight back to them; their channels are closed last, once each.
        """
        names = topics or tuple(self.subs)
        subs = [sub for name in names if (sub := self.subs.pop(name, None)) is not None]
        consumers = {id(sub.consumer): sub.consumer for sub in subs if sub.consumer is not None}
        for consumer in consumers.values():
            consumer.cancel()
        for sub in subs:
            sub.consumer = None
            return_to_head(
                [h for h in sub.drop_all() if h.generation == self.generation], self.driver_type
            )
        channels = {id(c.channel): c.channel for c in consumers.values() if c.channel}
        for channel in channels.values():
            channel.close()

    def next_delivery(self, sub: Subscription) -> Delivery | None:
        """The next deliverable message of ``sub`` as a ``Delivery``, or None if none is held."""
        while True:
            held = sub.take()
            if held is None:
                return None
            if held.generation != self.generation:
                continue
            try:
                envelope = decode_body(held.message, max_bytes=self.max_bytes)
            except EnvelopeError as exc:
                if self._undecodable.dead_letters is None:
                    return self._delivery(sub, held, held.message.body)
                self._drop(sub, held, exc)
                continue
            attempts = broker_attempts(held.message, self.driver_type) + held.requeues
            return self._delivery(sub, held, stamp_attempt(envelope, attempts))

    def _delivery(self, sub: Subscription, held: Held, envelope: Any) -> Delivery:
        """Wrap ``held``; ``envelope`` is an ``Envelope``, or the raw body of a corrupt one."""
        ticket = held.ticket

        def ack() -> None:
            if sub.claim(held, ticket):
                self._finish(sub, held, "ack")

        def nack(requeue: bool = True) -> None:
            if not sub.claim(held, ticket):
                return
            if requeue:
                sub.requeue(held)
            else:
                self._finish(sub, held, "reject")

        return Delivery(envelope, sub.topic, ack, nack)

    def _finish(self, sub: Subscription, held: Held, how: str) -> None:
        sub.finish(held)
        if held.generation == self.generation:
            self._settle(held, how)

    def _drop(self, sub: Subscription, held: Held, exc: EnvelopeError) -> None:
        if sub.claim(held, held.ticket):
            recorded = self._undecodable.report(sub.topic, held.message, exc)
            self._finish(sub, held, "ack" if recorded else "reject")
