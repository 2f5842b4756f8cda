"""The inbound dispatcher as a Celery worker consumer step, beside ordinary tasks.

``install_dispatcher(app, factory, topics)`` adds a ``bootsteps.ConsumerStep`` to the
worker's consumer blueprint. The step consumes the topics' partition queues on a channel
of the worker's own broker connection, so Celery's connection handling (reconnects,
heartbeats, shutdown) covers it, and runs ``InboundDispatcher.run_once_sync`` over what
arrived. Messages reach it through the worker's event loop (or its blocking loop with the
solo and thread pools); deliveries that must be retried stay held, in order, and are tried
again by a timer, never in a tight loop. The dispatcher is built by ``factory`` in the
worker's main process, once per worker, after the pool forked.

It does not need ``Xsm``: any Celery app can host a dispatcher. ``celery`` imports
``kombu`` here on purpose: the step speaks kombu to the worker's broker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from celery import bootsteps
from kombu import Consumer

from xsm_celery.celery.worker.consumer_dead_letters import adopt_app_dead_letters
from xsm_celery.eda import Delivery
from xsm_celery.eda.envelope import DEFAULT_MAX_ENVELOPE_BYTES
from xsm_celery.errors import BrokerPublishError, ConfigurationError
from xsm_celery.kombu import DEFAULT_PREFETCH, Partitioning
from xsm_celery.kombu.inbound import Inbound, settle_message
from xsm_celery.kombu.subscription import Held, Subscription
from xsm_celery.kombu.wire import declare_queue

__all__ = ["DEFAULT_RETRY_S", "DispatcherStep", "install_dispatcher"]

logger = logging.getLogger(__name__)

#: Seconds between two tries of deliveries the dispatcher asked to requeue.
DEFAULT_RETRY_S = 1.0


@dataclass(frozen=True)
class StepConfig:
    """What one installed step consumes and how."""

    factory: Callable[[], Any]
    topics: tuple[str, ...]
    partitioning: Partitioning
    prefetch: int = DEFAULT_PREFETCH
    queue_type: str = "quorum"
    queue_arguments: tuple[tuple[str, Any], ...] = ()
    retry_s: float = DEFAULT_RETRY_S
    max_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES
    dead_letters: Any = None
    allow_memory_dead_letters: bool = False


class _HeldBroker:
    """A ``SyncBrokerAdapter`` view of the messages the step holds; it never waits."""

    def __init__(self, inbound: Inbound) -> None:
        self.inbound = inbound

    def subscribe(self, topic: str, *, timeout: float | None = None) -> Iterator[Delivery]:
        sub = self.inbound.subs.get(topic)
        while sub is not None:
            delivery = self.inbound.next_delivery(sub)
            if delivery is None:
                return
            yield delivery

    def publish(self, topic: str, envelope: Any) -> None:
        raise BrokerPublishError(
            f"the consumer step only consumes; publish to {topic!r} with a KombuBrokerAdapter "
            "or the outbox relay"
        )

    def ack(self, delivery: Delivery) -> None:
        delivery.ack()

    def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        delivery.nack(requeue=requeue)


class DispatcherStep(bootsteps.ConsumerStep):
    """Consume envelopes into an ``InboundDispatcher`` inside the worker.

    ``install_dispatcher`` makes a subclass carrying its ``config``; use that instead of
    this class directly.
    """

    config: ClassVar[StepConfig]

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._app = parent.app
        self._undecodable_to: Any = self.config.dead_letters
        self.dispatcher: Any = None
        self.inbound: Inbound | None = None
        self._timer: Any = None
        self._cooldown: dict[str, float] = {}
        self._busy = False

    def get_consumers(self, channel: Any) -> list[Consumer]:
        """One kombu consumer on every partition queue this worker reads."""
        config = self.config
        if self.dispatcher is None:
            self.dispatcher = config.factory()
            store = adopt_app_dead_letters(
                self.dispatcher, self._app, allow_memory=config.allow_memory_dead_letters
            )
            if self._undecodable_to is None:
                self._undecodable_to = store
        driver = channel.connection.client.transport.driver_type
        errors = (
            *channel.connection.client.connection_errors,
            *channel.connection.client.channel_errors,
        )

        def settle(held: Held, how: str) -> None:
            settle_message(held, how, errors)

        self.inbound = Inbound(
            driver, settle, max_bytes=config.max_bytes, dead_letters=self._undecodable_to
        )
        consumers = []
        for topic in config.topics:
            sub = self.inbound.open(topic, config.partitioning.consume_queues(topic))
            sub.consumer = Consumer(
                channel,
                queues=[self._queue(name, driver) for name in sub.queues],
                on_message=self._receiver(sub),
                prefetch_count=config.prefetch,
            )
            consumers.append(sub.consumer)
        return consumers

    def _queue(self, name: str, driver: str) -> Any:
        config = self.config
        return declare_queue(
            name, driver, queue_type=config.queue_type, arguments=dict(config.queue_arguments)
        )

    def start(self, c: Any) -> None:
        """Start consuming, and the timer that retries held deliveries."""
        super().start(c)
        interval = self.config.retry_s
        self._timer = c.timer.call_repeatedly(interval, lambda: c.call_soon(self._retry_held))

    def stop(self, c: Any) -> None:
        """Hand held messages back to the broker, oldest first, and stop consuming."""
        self._release(c)
        super().stop(c)

    def shutdown(self, c: Any) -> None:
        """As ``stop``, at worker shutdown."""
        self._release(c)
        super().shutdown(c)

    def _release(self, c: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        inbound, self.inbound = self.inbound, None
        if inbound is None:
            return
        try:
            inbound.close()
        except Exception as exc:  # the connection may be the reason we stop
            logger.debug("could not return held messages: %s", exc)

    def _receiver(self, sub: Subscription) -> Callable[[Any], None]:
        """The consumer callback of ``sub``: hold the message, then dispatch unless cooling."""
        assert self.inbound is not None
        hold = self.inbound.receiver(sub)

        def on_message(message: Any) -> None:
            hold(message)
            if time.monotonic() >= self._cooldown.get(sub.topic, 0.0):
                self._dispatch(sub.topic)

        return on_message

    def _retry_held(self) -> None:
        inbound = self.inbound
        if inbound is None:
            return
        now = time.monotonic()
        for topic, sub in list(inbound.subs.items()):
            if sub.held and now >= self._cooldown.get(topic, 0.0):
                self._dispatch(topic)

    def _dispatch(self, topic: str) -> None:
        if self._busy or self.inbound is None:
            return
        self._busy = True
        try:
            result = self.dispatcher.run_once_sync(_HeldBroker(self.inbound), topic)
        except Exception:
            logger.exception("dispatching %r failed; its deliveries stay held for a retry", topic)
            self._cooldown[topic] = time.monotonic() + self.config.retry_s
            return
        finally:
            self._busy = False
        if result.retried:
            self._cooldown[topic] = time.monotonic() + self.config.retry_s


def install_dispatcher(
    app: Any,
    dispatcher_factory: Callable[[], Any],
    topics: str | Iterable[str],
    *,
    partitions: int = 1,
    consume: Iterable[int] | None = None,
    prefetch: int = DEFAULT_PREFETCH,
    queue_type: str = "quorum",
    queue_arguments: dict[str, Any] | None = None,
    retry_s: float = DEFAULT_RETRY_S,
    max_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
    dead_letters: Any = None,
    allow_memory_dead_letters: bool = False,
) -> type[DispatcherStep]:
    """Run an ``InboundDispatcher`` in every worker of ``app``; return the step class.

    Args:
        app: The Celery app whose workers consume the topics.
        dispatcher_factory: Builds the dispatcher, in the worker (stores open there).
        topics: The topic or topics to consume.
        partitions: Partition queues per topic; the producers' value.
        consume: The partitions this worker reads (all by default). With RabbitMQ every
            worker may read all of them (one active consumer per queue); with Redis give
            each worker a disjoint share, for example from a worker option.
        prefetch: Unacknowledged messages the broker may hand the step.
        queue_type, queue_arguments: RabbitMQ queue settings, as ``KombuBrokerAdapter``.
        retry_s: Pause before held (requeued) deliveries are tried again.
        max_bytes: Envelope size cap.
        dead_letters: Where undecodable messages go; by default the dispatcher's store
            records them as ``corrupt``. A dispatcher built without ``dead_letters=`` gets
            the app's ``xsm_dead_letter_store``.
        allow_memory_dead_letters: Accept a store in process memory (tests only); without
            it the worker refuses to start the step with such a store.
    """
    names = (topics,) if isinstance(topics, str) else tuple(topics)
    if not names:
        raise ConfigurationError("install_dispatcher() needs at least one topic")
    if not retry_s > 0:
        raise ConfigurationError(f"retry_s must be > 0 seconds, got {retry_s!r}")
    config = StepConfig(
        factory=dispatcher_factory,
        topics=names,
        partitioning=Partitioning(partitions, consume),
        prefetch=prefetch,
        queue_type=queue_type,
        queue_arguments=tuple(sorted((queue_arguments or {}).items())),
        retry_s=float(retry_s),
        max_bytes=max_bytes,
        dead_letters=dead_letters,
        allow_memory_dead_letters=allow_memory_dead_letters,
    )
    step: type[DispatcherStep] = type(
        "XsmDispatcherStep", (DispatcherStep,), {"config": config, "name": "xsm.dispatcher"}
    )
    app.steps["consumer"].add(step)
    return step
