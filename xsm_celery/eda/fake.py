"""In-memory brokers for tests: the whole event flow in one process, no broker needed.

They keep the adapter contract exactly (per-subject order, explicit settlement, requeue to
the head, settling twice a no-op, a failed publish raises), so code tested against them
behaves the same on a real broker. Envelopes cross them as JSON, as on a wire: an
oversized or non-JSON envelope fails at publish, and a consumer that mutates
``delivery.envelope.data`` changes neither the redelivery nor the ``published`` record.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from xsm_celery.eda.broker import Delivery
from xsm_celery.eda.envelope import DEFAULT_MAX_ENVELOPE_BYTES, Envelope
from xsm_celery.errors import (
    ArgumentTypeError,
    BrokerPublishError,
    BrokerUnavailableError,
    ConfigurationError,
    RunawayChainError,
)

__all__ = [
    "DEFAULT_DRAIN_LIMIT",
    "BrokerPublishError",
    "FakeBrokerAdapter",
    "SyncFakeBrokerAdapter",
]

#: ``drain()`` gives up after this many envelopes: a handler feeding its own topic loops.
DEFAULT_DRAIN_LIMIT = 100_000
_ASYNC_POLL_S = 0.002


class _Pending:
    """The broker's side of one in-flight delivery: what a requeue puts back."""

    __slots__ = ("envelope", "settled", "topic")

    def __init__(self, topic: str, envelope: Envelope) -> None:
        self.topic = topic
        self.envelope = envelope
        self.settled = False


class _Bus:
    """The queues and records both fakes share; every method is thread-safe."""

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES) -> None:
        self.max_bytes = int(max_bytes)
        self._cond = threading.Condition()
        self._queues: dict[str, deque[Envelope]] = {}
        self._log: list[tuple[str, Envelope]] = []
        self._failures: list[Exception] = []
        self._handlers: dict[str, Callable[[Envelope], Any]] = {}
        self._in_flight = 0
        #: Every accepted envelope, in publish order (copies: compare by id or value).
        self.published: list[Envelope] = []
        #: Envelopes that were acked, in settlement order.
        self.acked: list[Envelope] = []
        #: Envelopes that were nacked (with or without requeue), in settlement order.
        self.nacked: list[Envelope] = []

    def fail_next_publish(self, error: Exception | None = None, *, times: int = 1) -> None:
        """Make the next ``times`` publishes raise ``error``.

        The default is ``BrokerUnavailableError``, an outage: the relay retries it without
        counting. Pass ``BrokerPublishError(...)`` to play a broker refusing the message.
        """
        if error is not None and not isinstance(error, Exception):
            raise ArgumentTypeError(
                f"fail_next_publish() needs an Exception instance, got {type(error).__name__}"
            )
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise ConfigurationError(f"times must be an int >= 1, got {times!r}")
        with self._cond:
            for _ in range(times):
                self._failures.append(
                    error or BrokerUnavailableError("injected publish failure: broker down")
                )

    def published_on(self, topic: str) -> list[Envelope]:
        """Return the envelopes published on ``topic``, oldest first."""
        with self._cond:
            return [env for name, env in self._log if name == topic]

    def pending(self, topic: str) -> int:
        """Return how many envelopes wait on ``topic`` (in-flight ones not counted)."""
        with self._cond:
            return len(self._queues.get(topic, ()))

    @property
    def in_flight(self) -> int:
        """How many deliveries were taken and not yet settled."""
        with self._cond:
            return self._in_flight

    def topics(self) -> list[str]:
        """Return every topic that ever held an envelope, sorted."""
        with self._cond:
            return sorted(self._queues)

    def clear(self) -> None:
        """Forget queues, records, injected failures and handlers."""
        with self._cond:
            for box in (self._queues, self._log, self._failures, self._handlers):
                box.clear()
            self.published.clear()
            self.acked.clear()
            self.nacked.clear()

    def on(self, topic: str, handler: Callable[[Envelope], Any]) -> None:
        """Register ``handler`` for ``topic``; ``drain()`` calls it per envelope."""
        with self._cond:
            self._handlers[topic] = handler

    def drain(self, topic: str | None = None, *, limit: int = DEFAULT_DRAIN_LIMIT) -> int:
        """Run the registered handlers until their topics are empty; return how many ran.

        A handler that returns acks its envelope; one that raises nacks it without
        requeue and the exception propagates. Handlers may publish; what they publish
        is drained in the same call. More than ``limit`` envelopes raise ``RuntimeError``.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(f"drain(): limit must be an int >= 1, got {limit!r}")
        handled = 0
        while True:
            with self._cond:
                handlers = [
                    (name, fn) for name, fn in self._handlers.items() if topic in (None, name)
                ]
            progressed = False
            for name, handler in handlers:
                taken = self._take_pending(name)
                if taken is None:
                    continue
                delivery, pending = taken
                if handled >= limit:
                    self._release(pending)
                    raise RunawayChainError(
                        f"drain() handled {limit} envelopes and '{name}' is still not empty; "
                        "is a handler publishing to its own topic?",
                        limit=limit,
                    )
                progressed = True
                self._run_handler(handler, delivery, pending)
                handled += 1
            if not progressed:
                return handled

    def _run_handler(
        self, handler: Callable[[Envelope], Any], delivery: Delivery, pending: _Pending
    ) -> None:
        try:
            handler(delivery.envelope)
        except Exception:
            delivery.nack(requeue=False)
            raise
        except BaseException:
            self._release(pending)
            raise
        delivery.ack()

    def _wire(self, envelope: Envelope) -> Envelope:
        if not isinstance(envelope, Envelope):
            raise ArgumentTypeError(f"an Envelope is needed, got {type(envelope).__name__}")
        text = envelope.to_json(max_bytes=self.max_bytes)
        return Envelope.from_json(text, max_bytes=self.max_bytes)

    def _publish(self, topic: str, envelope: Envelope) -> None:
        if not isinstance(envelope, Envelope):
            raise ArgumentTypeError(f"publish() needs an Envelope, got {type(envelope).__name__}")
        with self._cond:
            if self._failures:
                raise self._failures.pop(0)
        wired = self._wire(envelope)
        with self._cond:
            self.published.append(self._wire(wired))
            self._log.append((topic, wired))
            self._queues.setdefault(topic, deque()).append(wired)
            self._cond.notify_all()

    def _inject(self, topic: str, envelope: Envelope) -> None:
        wired = self._wire(envelope)
        with self._cond:
            self._queues.setdefault(topic, deque()).append(wired)
            self._cond.notify_all()

    def _take(self, topic: str) -> Delivery | None:
        taken = self._take_pending(topic)
        return None if taken is None else taken[0]

    def _take_pending(self, topic: str) -> tuple[Delivery, _Pending] | None:
        with self._cond:
            queue = self._queues.get(topic)
            if not queue:
                return None
            pending = _Pending(topic, queue.popleft())
            self._in_flight += 1
        copy = self._wire(pending.envelope)

        def ack() -> None:
            self._settle_pending(pending, copy, ack=True, requeue=False)

        def nack(requeue: bool = True) -> None:
            self._settle_pending(pending, copy, ack=False, requeue=requeue)

        return Delivery(copy, topic, ack, nack), pending

    def _wait(self, topic: str, timeout: float | None) -> bool:
        """Block until ``topic`` has an envelope or ``timeout`` idle seconds passed."""
        with self._cond:
            return self._cond.wait_for(lambda: bool(self._queues.get(topic)), timeout)

    def _release(self, pending: _Pending) -> None:
        """Put an unsettled delivery back at the head, uncounted: its handler never decided."""
        with self._cond:
            if pending.settled:
                return
            pending.settled = True
            self._in_flight -= 1
            self._queues.setdefault(pending.topic, deque()).appendleft(pending.envelope)
            self._cond.notify_all()

    def _settle_pending(
        self, pending: _Pending, seen: Envelope, *, ack: bool, requeue: bool
    ) -> None:
        with self._cond:
            if pending.settled:
                return
            pending.settled = True
            self._in_flight -= 1
            if ack:
                self.acked.append(seen)
                return
            self.nacked.append(seen)
            if requeue:
                again = pending.envelope.with_attempt(pending.envelope.attempt + 1)
                self._queues.setdefault(pending.topic, deque()).appendleft(again)
                self._cond.notify_all()


class SyncFakeBrokerAdapter(_Bus):
    """In-memory blocking ``SyncBrokerAdapter``.

    ``subscribe(topic)`` blocks while idle, like a real consumer; in tests pass an idle
    ``timeout`` (``0`` drains what is queued and stops). A requeued delivery comes back
    first, with ``attempt`` one higher.
    """

    def publish(self, topic: str, envelope: Envelope) -> None:
        """Accept ``envelope`` on ``topic``, or raise an injected failure."""
        self._publish(topic, envelope)

    def deliver(self, topic: str, envelope: Envelope) -> None:
        """Queue an inbound envelope as if a producer sent it (not recorded as published)."""
        self._inject(topic, envelope)

    def subscribe(self, topic: str, *, timeout: float | None = None) -> Iterator[Delivery]:
        """Yield deliveries from ``topic`` until ``timeout`` idle seconds pass."""
        while True:
            delivery = self._take(topic)
            if delivery is not None:
                yield delivery
                continue
            if timeout is not None and timeout <= 0:
                return
            if not self._wait(topic, timeout):
                return

    def ack(self, delivery: Delivery) -> None:
        """Settle ``delivery`` as done."""
        delivery.ack()

    def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        """Settle ``delivery`` as failed, back to the head of its topic with ``requeue``."""
        delivery.nack(requeue=requeue)


class FakeBrokerAdapter(_Bus):
    """In-memory asyncio ``BrokerAdapter``; the same bus as ``SyncFakeBrokerAdapter``."""

    async def publish(self, topic: str, envelope: Envelope) -> None:
        """Accept ``envelope`` on ``topic``, or raise an injected failure."""
        self._publish(topic, envelope)

    async def deliver(self, topic: str, envelope: Envelope) -> None:
        """Queue an inbound envelope as if a producer sent it (not recorded as published)."""
        self._inject(topic, envelope)

    async def subscribe(
        self, topic: str, *, timeout: float | None = None
    ) -> AsyncIterator[Delivery]:
        """Yield deliveries from ``topic`` until ``timeout`` idle seconds pass."""
        idle_since = time.monotonic()
        while True:
            delivery = self._take(topic)
            if delivery is not None:
                yield delivery
                idle_since = time.monotonic()
                continue
            if timeout is not None and time.monotonic() - idle_since >= timeout:
                return
            await asyncio.sleep(_ASYNC_POLL_S)

    async def ack(self, delivery: Delivery) -> None:
        """Settle ``delivery`` as done."""
        delivery.ack()

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        """Settle ``delivery`` as failed, back to the head of its topic with ``requeue``."""
        delivery.nack(requeue=requeue)
