"""The consumer side of one topic: received messages held in arrival order until yielded.

A requeue is kept here instead of being handed back to the broker, because no kombu
transport puts a rejected message back at the head: Redis pushes it to the tail and
RabbitMQ quorum queues (before 4.0) do the same, which would let a later envelope of the
same subject overtake it. The message stays unacknowledged at the broker while it is held,
so a consumer that dies still loses nothing: the broker redelivers it.

Entries are ordered by arrival number, so several requeued deliveries of one subject come
back in the order they first arrived, ahead of anything received after them.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Held", "Subscription"]


@dataclass(order=True)
class Held:
    """One received message: its arrival number, local requeues and settlement state."""

    seq: int
    message: Any = field(compare=False)
    generation: int = field(compare=False)
    requeues: int = field(default=0, compare=False)
    #: Bumped each time the entry is handed out; a stale Delivery cannot settle it.
    ticket: int = field(default=0, compare=False)
    settled: bool = field(default=False, compare=False)


class Subscription:
    """What one adapter consumes for one topic: its queues, consumer and held messages."""

    def __init__(self, topic: str, queues: list[str]) -> None:
        self.topic = topic
        self.queues = queues
        self.consumer: Any = None
        self._ready: list[Held] = []
        self._in_flight: dict[int, Held] = {}
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def receive(self, message: Any, generation: int) -> None:
        """Hold a message the broker just delivered, behind everything received before."""
        with self._lock:
            heapq.heappush(self._ready, Held(next(self._counter), message, generation))

    def take(self) -> Held | None:
        """Return the oldest held message and mark it in flight, or None when empty."""
        with self._lock:
            if not self._ready:
                return None
            held = heapq.heappop(self._ready)
            held.ticket += 1
            self._in_flight[held.seq] = held
            return held

    def claim(self, held: Held, ticket: int) -> bool:
        """Mark ``held`` settled once; False when that hand-out was already settled."""
        with self._lock:
            if held.settled or held.ticket != ticket or held.seq not in self._in_flight:
                return False
            del self._in_flight[held.seq]
            return True

    def requeue(self, held: Held) -> None:
        """Put a claimed message back in arrival order, one local requeue more."""
        with self._lock:
            held.requeues += 1
            heapq.heappush(self._ready, held)

    def finish(self, held: Held) -> None:
        """Record that a claimed message was acknowledged or rejected at the broker."""
        held.settled = True

    def drop_all(self) -> list[Held]:
        """Forget every held and in-flight message (the connection they came on is gone)."""
        with self._lock:
            dropped = sorted([*self._ready, *self._in_flight.values()])
            self._ready.clear()
            self._in_flight.clear()
            return dropped

    @property
    def held(self) -> int:
        """Messages waiting to be yielded (requeued ones included)."""
        with self._lock:
            return len(self._ready)

    @property
    def in_flight(self) -> int:
        """Messages yielded and not yet settled."""
        with self._lock:
            return len(self._in_flight)
