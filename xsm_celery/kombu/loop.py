"""A blocking consumer loop that outlives broker outages, for processes outside Celery.

``InboundDispatcher.run_once_sync`` never raises for anything an envelope or a store does,
but the broker itself can vanish (a Redis restart, a RabbitMQ failover): the adapter then
raises ``BrokerError`` once its reconnects are spent. This loop waits and tries again, with
a growing pause, until the broker is back or it is told to stop; nothing is lost meanwhile,
because every unsettled message is still the broker's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from xsm_celery.errors import BrokerError

__all__ = ["consume_forever"]

logger = logging.getLogger(__name__)


def consume_forever(
    dispatcher: Any,
    broker: Any,
    topics: str | Iterable[str],
    stop: threading.Event,
    *,
    idle_s: float = 0.05,
    backoff_s: float = 0.5,
    max_backoff_s: float = 10.0,
) -> int:
    """Dispatch ``topics`` until ``stop`` is set; return how many envelopes were handled.

    Args:
        dispatcher: An ``InboundDispatcher``.
        broker: A ``SyncBrokerAdapter`` (``KombuBrokerAdapter``).
        topics: One topic or several, served in turn.
        stop: Set it (from any thread) to end the loop after the current batch.
        idle_s: Pause when every topic was empty.
        backoff_s: First pause after a broker failure; doubles up to ``max_backoff_s``.
    """
    names = [topics] if isinstance(topics, str) else list(topics)
    handled = 0
    pause = backoff_s
    while not stop.is_set():
        busy = False
        try:
            for topic in names:
                result = dispatcher.run_once_sync(broker, topic)
                handled += result.total
                busy = busy or bool(result.total)
        except BrokerError as exc:
            logger.warning("broker unavailable (%s); retrying in %.1fs", exc, pause)
            stop.wait(pause)
            pause = min(pause * 2, max_backoff_s)
            continue
        pause = backoff_s
        if not busy:
            stop.wait(idle_s)
    return handled
