"""What a broker adapter must do, for asyncio callers and for blocking ones.

The contract every adapter keeps (and ``tests/eda/contract.py`` checks): order is kept per
subject, never globally; a delivery stays in flight until it is settled explicitly; a
requeued delivery goes back to the head of its subject; settling twice is a no-op; and a
publish that was not accepted raises instead of returning.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol, runtime_checkable

from xsm_celery.eda.envelope import Envelope
from xsm_celery.engine.awaiting import maybe_await

__all__ = [
    "BatchPublisher",
    "BrokerAdapter",
    "Delivery",
    "SyncBrokerAdapter",
    "maybe_await",
]


class Delivery(NamedTuple):
    """One received envelope plus the callables that settle it.

    ``ack()`` and ``nack(requeue=True)`` return ``None`` on a blocking adapter and an
    awaitable on an async one. Settling a delivery a second time does nothing.
    """

    envelope: Envelope
    topic: str
    ack: Callable[[], Any]
    nack: Callable[..., Any]


@runtime_checkable
class BrokerAdapter(Protocol):
    """The asyncio broker contract."""

    async def publish(self, topic: str, envelope: Envelope) -> None:
        """Publish ``envelope`` on ``topic``; raise if the broker did not accept it."""

    def subscribe(self, topic: str, *, timeout: float | None = None) -> AsyncIterator[Delivery]:
        """Yield deliveries in per-subject order.

        With ``timeout`` the iteration ends after that many idle seconds; ``0`` drains
        what is queued now and stops. Without it the iteration waits for ever.
        """

    async def ack(self, delivery: Delivery) -> None:
        """Settle ``delivery`` as done; the broker forgets it."""

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        """Settle ``delivery`` as failed; with ``requeue`` it goes back to the head."""


@runtime_checkable
class SyncBrokerAdapter(Protocol):
    """The blocking twin of ``BrokerAdapter`` for threads, Celery workers and Django."""

    def publish(self, topic: str, envelope: Envelope) -> None:
        """Publish ``envelope`` on ``topic``; raise if the broker did not accept it."""

    def subscribe(self, topic: str, *, timeout: float | None = None) -> Iterator[Delivery]:
        """Yield deliveries in per-subject order; ``timeout`` is idle seconds as above."""

    def ack(self, delivery: Delivery) -> None:
        """Settle ``delivery`` as done."""

    def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        """Settle ``delivery`` as failed; with ``requeue`` it goes back to the head."""


@runtime_checkable
class BatchPublisher(Protocol):
    """An adapter that can publish many envelopes in one round trip.

    Optional: ``OutboxRelay`` uses it when present and falls back to one ``publish`` per
    row otherwise. All of ``envelopes`` are accepted or the call raises.
    """

    def publish_many(self, topic: str, envelopes: Iterable[Envelope]) -> None:
        """Publish every envelope on ``topic`` in order; raise if any was not accepted."""
