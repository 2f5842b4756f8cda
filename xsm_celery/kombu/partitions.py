"""Map a topic and an envelope subject to the broker queue that carries it.

Per-subject order with several consumers needs every envelope of one subject on one queue
that only one consumer reads at a time. A topic is therefore split into ``partitions``
queues and each subject goes to one of them by a hash that every process computes the
same way (``zlib.crc32``, never Python's salted ``hash()``). A topic with one partition is a
single queue named like the topic, so other kombu or Celery code can read it by name.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

from xsm_celery.checks import positive_int
from xsm_celery.errors import ConfigurationError

__all__ = ["Partitioning", "partition_of", "queue_name"]


def partition_of(subject: str | None, partitions: int) -> int:
    """Return the partition (0-based) that carries ``subject`` among ``partitions``.

    Envelopes without a subject have no order to keep and all go to partition 0.
    """
    if partitions < 1:
        raise ConfigurationError(f"partitions must be >= 1, got {partitions!r}")
    if partitions == 1 or not subject:
        return 0
    return zlib.crc32(subject.encode("utf-8")) % partitions


def queue_name(topic: str, partition: int, partitions: int) -> str:
    """Return the queue name of one partition: the topic itself, or ``<topic>.p<n>``."""
    if not 0 <= partition < partitions:
        raise ConfigurationError(f"partition {partition!r} is outside 0..{partitions - 1}")
    return topic if partitions == 1 else f"{topic}.p{partition}"


class Partitioning:
    """How one adapter splits topics: the partition count and the partitions it consumes.

    Producers and consumers of a topic must agree on ``partitions``. ``consume`` lists the
    partitions this process reads; the default is all of them, which is safe on RabbitMQ
    (each partition queue has a single active consumer) but on Redis, which has no such
    feature, each consumer process must be given a disjoint share.
    """

    def __init__(self, partitions: int = 1, consume: Iterable[int] | None = None) -> None:
        positive_int("partitions", partitions)
        self.partitions = partitions
        chosen = tuple(range(partitions)) if consume is None else tuple(sorted(set(consume)))
        for number in chosen:
            queue_name("topic", number, partitions)
        if not chosen:
            raise ConfigurationError("consume must name at least one partition")
        self.consume: Sequence[int] = chosen

    def publish_queue(self, topic: str, subject: str | None) -> str:
        """Return the queue an envelope with ``subject`` is published to."""
        return queue_name(topic, partition_of(subject, self.partitions), self.partitions)

    def consume_queues(self, topic: str) -> list[str]:
        """Return the queues this process reads for ``topic``, lowest partition first."""
        return [queue_name(topic, n, self.partitions) for n in self.consume]

    def all_queues(self, topic: str) -> list[str]:
        """Return every partition queue of ``topic`` (for purging and declaring)."""
        return [queue_name(topic, n, self.partitions) for n in range(self.partitions)]
