"""Queue lengths read from the broker on each scrape: ``celery_queue_length{queue_name}``.

A counter says what a worker did; only the broker knows what waits. The collector asks it
on every scrape, with a passive ``queue_declare`` that creates nothing: on RabbitMQ that is
the queue's message and consumer count; on Redis (kombu's virtual transport) it is the
summed length of the queue's lists, every priority included. A Redis queue with no message
has no key, so it reads 0; a RabbitMQ queue that does not exist is left out, as is every
queue when the broker does not answer: a gauge reads the truth or is absent.

Which queues: those the app routes to (``app_queues``), plus any the caller names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kombu.transport.virtual import Transport as VirtualTransport

from xsm_celery.errors import MissingExtraError

try:
    from prometheus_client.core import GaugeMetricFamily
except ImportError as exc:
    raise MissingExtraError(extra="metrics", module="prometheus_client") from exc

__all__ = ["QueueLengthCollector", "app_queues", "read_queue_lengths"]

logger = logging.getLogger(__name__)

#: Seconds a scrape waits for the broker before it leaves the queue gauges out.
CONNECT_TIMEOUT_S = 2.0


def app_queues(app: Any) -> list[str]:
    """The queues ``app`` routes tasks to, sorted.

    The default queue, the declared ``task_queues``, the queue of every static route in
    ``task_routes`` and every task's own ``queue`` option. A router function cannot be
    read ahead of a message: name its queues to the collector yourself.
    """
    conf = app.conf
    names: set[str] = set()
    if conf.task_default_queue:
        names.add(str(conf.task_default_queue))
    for queue in conf.task_queues or ():
        name = getattr(queue, "name", queue)
        if isinstance(name, str):
            names.add(name)
    names.update(_route_queues(conf.task_routes))
    for task in list(app.tasks.values()):
        queue = getattr(task, "queue", None)
        if isinstance(queue, str) and queue:
            names.add(queue)
    return sorted(names)


def _route_queues(routes: Any) -> set[str]:
    found: set[str] = set()
    for route in routes if isinstance(routes, list | tuple) else [routes]:
        if not isinstance(route, Mapping):
            continue
        for target in route.values():
            queue = target.get("queue") if isinstance(target, Mapping) else None
            name = getattr(queue, "name", queue)
            if isinstance(name, str) and name:
                found.add(name)
    return found


def read_queue_lengths(app: Any, queues: Iterable[str]) -> dict[str, tuple[int, int | None]]:
    """``queue -> (messages, consumers)`` from the broker; consumers is None on Redis.

    Raises whatever the broker connection raises when it cannot connect at all.
    """
    found: dict[str, tuple[int, int | None]] = {}
    with app.connection_for_read(connect_timeout=CONNECT_TIMEOUT_S) as conn:
        conn.ensure_connection(max_retries=1)
        # Redis and the in-memory transport keep no empty queue: missing means empty.
        virtual = isinstance(conn.transport, VirtualTransport)
        channel = conn.channel()
        try:
            for queue in queues:
                try:
                    _, messages, consumers = channel.queue_declare(queue=queue, passive=True)
                except conn.channel_errors:
                    if virtual:
                        found[queue] = (0, None)
                    channel = _fresh(conn, channel)
                    continue
                found[queue] = (int(messages), None if virtual else int(consumers))
        finally:
            channel.close()
    return found


def _fresh(conn: Any, channel: Any) -> Any:
    """A new channel: AMQP closes the one a refused passive declare ran on."""
    try:
        channel.close()
    except conn.connection_errors + conn.channel_errors:
        logger.debug("closing a refused channel failed", exc_info=True)
    return conn.channel()


class QueueLengthCollector:
    """A ``prometheus_client`` collector of ``celery_queue_length`` (and consumer counts).

    Args:
        app: The Celery app whose broker is asked.
        queues: Queues to read besides ``app_queues(app)``, or a function returning them.
    """

    def __init__(self, app: Any, queues: Iterable[str] | Callable[[], Iterable[str]] = ()) -> None:
        self._app = app
        self._queues = queues

    def queues(self) -> list[str]:
        """The queues the next scrape reads."""
        extra = self._queues() if callable(self._queues) else self._queues
        return sorted({*app_queues(self._app), *extra})

    def collect(self) -> Iterator[Any]:
        """The gauges of one reading (``prometheus_client`` calls this on scrape)."""
        try:
            lengths = read_queue_lengths(self._app, self.queues())
        except Exception as exc:  # a broker that is down must not fail the whole scrape
            logger.warning("xsm_celery: could not read queue lengths: %s", exc)
            return
        length = GaugeMetricFamily(
            "celery_queue_length",
            "Messages waiting in a broker queue.",
            labels=["queue_name"],
        )
        consumers = GaugeMetricFamily(
            "celery_active_consumer_count",
            "Consumers of a broker queue (RabbitMQ only).",
            labels=["queue_name"],
        )
        for queue, (messages, count) in sorted(lengths.items()):
            length.add_metric([queue], float(messages))
            if count is not None:
                consumers.add_metric([queue], float(count))
        yield length
        if consumers.samples:
            yield consumers
