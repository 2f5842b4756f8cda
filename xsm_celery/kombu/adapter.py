"""``KombuBrokerAdapter``: the blocking broker contract over any kombu transport.

Publishing goes through the anonymous exchange straight to a partition queue, so no
exchange has to exist and the relay's batched path can use kombu's ``Producer.batch``
(one Redis pipeline per batch). Consuming uses a kombu ``Consumer`` with a prefetch
window; deliveries are held per topic (``subscription.Subscription``) so a requeue goes
back to the head of its subject on every transport.

Publishing and consuming use two connections, each behind its own lock, because a kombu
connection is not thread-safe and a dispatcher may settle deliveries from worker threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from amqp.exceptions import MessageNacked
from kombu import Connection, Consumer, Producer, Queue
from kombu.exceptions import KombuError, OperationalError

from xsm_celery.checks import positive_int
from xsm_celery.eda import Delivery, Envelope
from xsm_celery.eda.envelope import DEFAULT_MAX_ENVELOPE_BYTES
from xsm_celery.errors import BrokerError, BrokerPublishError, BrokerUnavailableError
from xsm_celery.kombu.inbound import Inbound, settle_message
from xsm_celery.kombu.partitions import Partitioning
from xsm_celery.kombu.redis_client import reuse_redis_client
from xsm_celery.kombu.subscription import Held, Subscription
from xsm_celery.kombu.wire import AMQP_DRIVERS, declare_queue, publish_options

__all__ = ["KombuBrokerAdapter"]

logger = logging.getLogger(__name__)

#: Unacknowledged messages the broker may push to one adapter ahead of processing.
DEFAULT_PREFETCH = 100
#: Envelopes one kombu publish batch buffers before it flushes.
DEFAULT_BATCH_SIZE = 1000
#: Reconnect attempts before a publish or a consume gives up and raises.
DEFAULT_RETRIES = 3
#: How long ``subscribe(timeout=0)`` waits for messages already on their way.
DEFAULT_DRAIN_GRACE_S = 0.05
_POLL_S = 0.1
_REDIS_BRPOP_S = 0.2


class KombuBrokerAdapter:
    """A ``SyncBrokerAdapter`` (and ``BatchPublisher``) over a kombu connection.

    Args:
        url_or_connection: A broker URL (``redis://``, ``amqp://``, ``memory://``...) or a
            kombu ``Connection`` (for example ``app.connection_for_write()``); the adapter
            works on clones of it and closes only those.
        partitions: Queues per topic; every producer and consumer of a topic must agree.
        consume: Partitions this adapter reads (all by default; see ``Partitioning``).
        prefetch: Unacknowledged messages the broker may hand over ahead of processing.
        queue_type: RabbitMQ ``x-queue-type`` of partition queues; ``quorum`` counts
            deliveries, so a poison message is dead-lettered across consumer restarts.
        queue_arguments: More RabbitMQ queue arguments (``x-dead-letter-exchange``,
            ``x-max-length``...); every process declaring the queues must agree.
        max_bytes: Envelope size cap, checked before parsing and before publishing.
        dead_letters: Where undecodable messages are recorded (reason ``corrupt``) before
            they are acknowledged, never yielded. Without one, such a message is yielded
            with its raw body in ``Delivery.envelope``; ``InboundDispatcher`` dead-letters
            it as ``corrupt`` in its own store and acknowledges it.
        batch_size: Envelopes per flush in ``publish_many``.
        retries: Reconnect attempts before an operation raises.
        drain_grace_s: Idle time after which ``subscribe(timeout=0)`` stops.
        transport_options: Extra kombu transport options (``visibility_timeout``...).
    """

    def __init__(
        self,
        url_or_connection: str | Connection,
        *,
        partitions: int = 1,
        consume: Iterable[int] | None = None,
        prefetch: int = DEFAULT_PREFETCH,
        queue_type: str = "quorum",
        queue_arguments: dict[str, Any] | None = None,
        max_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
        dead_letters: Any = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        retries: int = DEFAULT_RETRIES,
        drain_grace_s: float = DEFAULT_DRAIN_GRACE_S,
        transport_options: dict[str, Any] | None = None,
    ) -> None:
        base = (
            url_or_connection
            if isinstance(url_or_connection, Connection)
            else Connection(url_or_connection)
        )
        self.driver_type: str = base.transport.driver_type
        options = dict(base.transport_options or {})
        options.update(transport_options or {})
        if self.driver_type in AMQP_DRIVERS:
            options.setdefault("confirm_publish", True)
        else:
            # The body is UTF-8 JSON already; base64 (kombu's default) only costs time.
            options.setdefault("body_encoding", "utf-8")
        self._pub_conn: Connection = base.clone(transport_options=options)
        consume_options = dict(options)
        if self.driver_type == "redis":
            # BRPOP's timeout bounds how long closing a consumer waits for Redis' reply.
            consume_options.setdefault("polling_interval", _REDIS_BRPOP_S)
        self._sub_conn: Connection = base.clone(transport_options=consume_options)
        self.partitioning = Partitioning(partitions, consume)
        self._partitioned = self.partitioning.partitions > 1
        self.prefetch = positive_int("prefetch", prefetch)
        self.batch_size = positive_int("batch_size", batch_size)
        self.retries = int(retries)
        self.queue_type = queue_type
        self.queue_arguments = dict(queue_arguments or {})
        self.max_bytes = int(max_bytes)
        self.drain_grace_s = float(drain_grace_s)
        self._pub_lock = threading.RLock()
        self._sub_lock = threading.RLock()
        # kombu reports a broker it cannot reach as OperationalError, which is a KombuError
        # but not one of the transport's connection errors: without it here a down broker
        # would be reported as a refusal and the relay would count it against the row.
        self._pub_errors: tuple[tuple[type[BaseException], ...], ...] = (
            (*self._pub_conn.connection_errors, OperationalError, OSError),
            (*self._pub_conn.channel_errors, KombuError, MessageNacked),
        )
        self._sub_errors: tuple[type[BaseException], ...] = (
            *self._sub_conn.connection_errors,
            *self._sub_conn.channel_errors,
        )
        self._inbound = Inbound(
            self.driver_type, self._settle, max_bytes=self.max_bytes, dead_letters=dead_letters
        )
        self._producer: Producer | None = None
        self._declared: set[str] = set()
        self._publish_kwargs = publish_options()

    def __repr__(self) -> str:
        return f"<KombuBrokerAdapter {self.driver_type} partitions={self.partitioning.partitions}>"

    def __enter__(self) -> KombuBrokerAdapter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def publish(self, topic: str, envelope: Envelope) -> None:
        """Publish ``envelope`` to its subject's partition of ``topic``.

        Raises:
            BrokerUnavailableError: the broker stayed unreachable through ``retries``
                reconnects (an outage: the relay retries without counting).
            BrokerPublishError: the broker refused the message (the relay counts it).
            EnvelopeError: the envelope is over ``max_bytes`` or not JSON.
        """
        body = envelope.to_json(max_bytes=self.max_bytes)
        queue = self._route(topic, envelope)
        self._with_producer(topic, lambda producer: self._send(producer, queue, body))

    def publish_many(self, topic: str, envelopes: Iterable[Envelope]) -> None:
        """Publish ``envelopes`` in order as kombu publish batches (one pipeline on Redis).

        All are encoded before any is sent, so a bad envelope fails the call up front.
        On a failure the whole call raises and may have published part of the batch:
        a caller that retries it publishes duplicates, which consumers' inboxes absorb.
        """
        listed = list(envelopes)
        cap = self.max_bytes
        bodies = [env.to_json(max_bytes=cap) for env in listed]
        if not bodies:
            return
        # Plain strings, not (queue, body) pairs: a relay's batch lives through the whole
        # publish, and every tracked object it holds that long is work for the GC.
        queues = [self._route(topic, env) for env in listed] if self._partitioned else None

        def send_all(producer: Producer) -> None:
            batch: Any = producer.batch  # type: ignore[attr-defined]  # kombu >= 5.7
            send, single = self._send, self.partitioning.publish_queue(topic, None)
            with batch(max_size=self.batch_size):
                for index, body in enumerate(bodies):
                    send(producer, single if queues is None else queues[index], body)

        self._with_producer(topic, send_all)

    def subscribe(self, topic: str, *, timeout: float | None = None) -> Iterator[Delivery]:
        """Yield deliveries of ``topic`` in per-subject order.

        With ``timeout`` the iteration ends after that many idle seconds (``0`` waits
        ``drain_grace_s`` for messages already on their way), or at once when the caller
        holds a full prefetch window unsettled (the broker sends nothing more until some
        are settled); without ``timeout`` it never ends.

        Raises:
            BrokerError: the broker stayed unreachable through ``retries`` reconnects.
        """
        sub = self._subscription(topic)
        limit = None if timeout is None else max(float(timeout), self.drain_grace_s)
        idle_since = time.monotonic()
        while True:
            delivery = self._next_delivery(sub)
            if delivery is not None:
                yield delivery
                idle_since = time.monotonic()
                continue
            waited = time.monotonic() - idle_since
            if limit is not None and (waited >= limit or sub.in_flight >= self.prefetch):
                return
            budget = _POLL_S if limit is None else min(_POLL_S, limit - waited)
            self._pump(max(budget, 0.001))

    def ack(self, delivery: Delivery) -> None:
        """Settle ``delivery`` as done; a second settlement does nothing."""
        delivery.ack()

    def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        """Settle ``delivery`` as failed; with ``requeue`` it is the next one of its topic."""
        delivery.nack(requeue=requeue)

    def declare(self, topic: str) -> None:
        """Create every partition queue of ``topic`` (publishing creates them lazily too)."""
        with self._pub_lock:
            channel = self._pub_conn.default_channel
            for name in self.partitioning.all_queues(topic):
                self._queue(name)(channel).declare()
                self._declared.add(name)

    def purge(self, topic: str) -> int:
        """Delete every queued message of ``topic``; return how many (tests, maintenance)."""
        with self._pub_lock:
            channel = self._pub_conn.default_channel
            total = 0
            for name in self.partitioning.all_queues(topic):
                bound = self._queue(name)(channel)
                bound.declare()
                total += int(bound.purge() or 0)
            return total

    def delete(self, topic: str) -> None:
        """Delete every partition queue of ``topic`` (test clean-up)."""
        self.close_subscription(topic)
        with self._pub_lock:
            channel = self._pub_conn.default_channel
            for name in self.partitioning.all_queues(topic):
                bound = self._queue(name)(channel)
                # Virtual transports delete only queues this channel knows: declare first.
                bound.declare()
                bound.delete()
                self._declared.discard(name)

    def close_subscription(self, topic: str) -> None:
        """Stop consuming ``topic``; messages held or in flight go back to the broker."""
        with self._sub_lock:
            try:
                self._inbound.close(topic)
            except self._sub_errors as exc:
                logger.warning("could not return held messages of %r (%s)", topic, exc)

    def close(self) -> None:
        """Stop every subscription and close both connections."""
        with self._sub_lock:
            for topic in list(self._inbound.subs):
                self.close_subscription(topic)
            self._sub_conn.release()
        with self._pub_lock:
            self._pub_conn.release()
            self._producer = None

    def _route(self, topic: str, envelope: Envelope) -> str:
        """The queue ``envelope`` goes to; with one partition its subject is never read.

        An outbox row's envelope is parsed on its first attribute read, so a relay on one
        partition publishes the stored text without decoding it.
        """
        subject = envelope.subject if self._partitioned else None
        return self.partitioning.publish_queue(topic, subject)

    def _queue(self, name: str) -> Queue:
        return declare_queue(
            name, self.driver_type, queue_type=self.queue_type, arguments=self.queue_arguments
        )

    def _with_producer(self, topic: str, action: Callable[[Producer], None]) -> None:
        """Run ``action`` with the producer, reconnecting on connection loss.

        A lost connection is retried (the publish may then happen twice, which consumers
        dedup); a refusal by the broker (a negative publisher confirm, a declare the
        broker rejects, a failed Redis pipeline) is not, since it would fail again.
        """
        lost, refused = self._pub_errors
        with self._pub_lock:
            for attempt in range(self.retries + 1):
                try:
                    producer = self._ensure_producer()
                except lost as exc:
                    # ensure_connection spent the reconnects already: the broker is away.
                    self._reset_producer()
                    raise BrokerUnavailableError(
                        f"publish to {topic!r} failed: no connection after {self.retries} "
                        f"reconnect(s): {exc}; the broker is unreachable, so the caller keeps "
                        "the envelope (an outbox row stays pending)"
                    ) from exc
                try:
                    action(producer)
                    return
                except lost as exc:
                    self._reset_producer()
                    if attempt >= self.retries:
                        raise BrokerUnavailableError(
                            f"publish to {topic!r} failed after {attempt + 1} attempt(s): "
                            f"{exc}; the broker is unreachable, so the caller keeps the "
                            "envelope (an outbox row stays pending)"
                        ) from exc
                    logger.warning("publish to %r failed (%s); reconnecting", topic, exc)
                except refused as exc:
                    self._reset_producer()
                    raise BrokerPublishError(
                        f"the broker refused a publish to {topic!r}: {type(exc).__name__}: "
                        f"{exc}; nothing is known to be delivered, a retry may duplicate"
                    ) from exc

    def _ensure_producer(self) -> Producer:
        if self._producer is None:
            _reconnect(self._pub_conn, self.retries)
            channel = self._pub_conn.default_channel
            reuse_redis_client(channel)
            self._producer = Producer(channel, auto_declare=False)
        return self._producer

    def _reset_producer(self) -> None:
        self._producer = None
        self._declared.clear()
        try:
            self._pub_conn.collect()
        except Exception:  # the connection is already broken; collect only frees it
            logger.debug("collecting a broken publish connection failed", exc_info=True)

    def _send(self, producer: Producer, queue: str, body: str) -> None:
        if queue not in self._declared:
            channel: Any = producer.channel
            self._queue(queue)(channel).declare()
            self._declared.add(queue)
        producer.publish(body, routing_key=queue, **self._publish_kwargs)

    def _subscription(self, topic: str) -> Subscription:
        with self._sub_lock:
            sub = self._inbound.subs.get(topic)
            if sub is None:
                sub = self._inbound.open(topic, self.partitioning.consume_queues(topic))
                self._start_consumer(sub)
            return sub

    def _start_consumer(self, sub: Subscription) -> None:
        channel = self._sub_conn.channel()
        reuse_redis_client(channel)  # every ack is a Redis pipeline
        consumer = Consumer(
            channel,
            queues=[self._queue(name) for name in sub.queues],
            on_message=self._inbound.receiver(sub),
            prefetch_count=self.prefetch,
        )
        consumer.consume()
        sub.consumer = consumer

    def _next_delivery(self, sub: Subscription) -> Delivery | None:
        with self._sub_lock:
            return self._inbound.next_delivery(sub)

    def _pump(self, timeout: float) -> None:
        """Let the consume connection deliver what arrives within ``timeout`` seconds."""
        with self._sub_lock:
            try:
                self._sub_conn.drain_events(timeout=timeout)
            except TimeoutError:
                return
            except self._sub_errors as exc:
                logger.warning("consuming failed (%s); reconnecting", exc)
                self._reconnect(exc)

    def _reconnect(self, cause: BaseException) -> None:
        """Start every subscription again on a fresh connection.

        Messages held from the old connection are forgotten: the broker still has them
        unacknowledged and delivers them again (RabbitMQ at once, Redis after its
        visibility timeout).
        """
        self._inbound.reset()
        try:
            self._sub_conn.collect()
        except Exception:
            logger.debug("collecting a broken consume connection failed", exc_info=True)
        try:
            _reconnect(self._sub_conn, self.retries)
            for sub in self._inbound.subs.values():
                self._start_consumer(sub)
        except Exception as exc:
            raise BrokerError(
                f"the broker stayed unreachable through {self.retries} reconnect(s) "
                f"after {cause}: {exc}; the consumer loop should back off and retry"
            ) from exc

    def _settle(self, held: Held, how: str) -> None:
        with self._sub_lock:
            settle_message(held, how, self._sub_errors)


def _reconnect(connection: Connection, retries: int) -> None:
    """Connect with a short back-off (0.05 s, then +0.25 s, at most 1 s between tries)."""
    ensure: Any = connection.ensure_connection  # the stubs say int; kombu takes seconds
    ensure(max_retries=retries, interval_start=0.05, interval_step=0.25, interval_max=1.0)
