"""Workers seen and up, by a ping on each scrape: ``celery_worker_up{hostname}``.

A worker cannot report its own death, so "up" is asked from outside: every scrape
broadcasts Celery's ``ping`` and waits ``timeout`` seconds for the replies. A worker that
answered once is remembered; while it answers it reads 1, when it stops it reads 0, and
after ``forget_after_s`` of silence its series goes away (a worker scaled down for good).
``count(celery_worker_up)`` is then the workers seen, ``sum(celery_worker_up)`` those up,
the same reading celery-exporter gives from heartbeat events.

It needs the workers' remote control (on unless a worker runs ``--without-control``);
the ``xsm-celery metrics`` process registers it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from xsm_celery.errors import MissingExtraError
from xsm_celery.metrics.labels import MAX_LABEL_LENGTH, MAX_SERIES

try:
    from prometheus_client.core import GaugeMetricFamily
except ImportError as exc:
    raise MissingExtraError(extra="metrics", module="prometheus_client") from exc

__all__ = ["DEFAULT_PING_TIMEOUT_S", "FORGET_AFTER_S", "WorkerCollector"]

logger = logging.getLogger(__name__)

#: Seconds a scrape waits for the workers' ping replies.
DEFAULT_PING_TIMEOUT_S = 1.0
#: Seconds of silence after which a worker's series is dropped.
FORGET_AFTER_S = 600.0


class WorkerCollector:
    """A ``prometheus_client`` collector of the workers that answer Celery's ping.

    Args:
        app: The Celery app whose workers are pinged.
        timeout: Seconds each scrape waits for replies.
        forget_after_s: Seconds of silence after which a worker is no longer listed.
        clock: Monotonic seconds (a test passes its own).
    """

    def __init__(
        self,
        app: Any,
        timeout: float = DEFAULT_PING_TIMEOUT_S,
        forget_after_s: float = FORGET_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._app = app
        self._timeout = timeout
        self._forget_after_s = forget_after_s
        self._clock = clock
        self._last_seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def ping(self) -> set[str] | None:
        """The node names that answered now; None when the broker could not be asked."""
        try:
            replies = self._app.control.ping(timeout=self._timeout)
        except Exception as exc:  # a broker that is down must not fail the whole scrape
            logger.warning("xsm_celery: could not ping the workers: %s", exc)
            return None
        # Node names (``w1@host``) are the workers' own, not the label guard's alphabet;
        # only their length and their number (``observe``) are bounded.
        return {name for reply in replies or () for name in reply if len(name) <= MAX_LABEL_LENGTH}

    def observe(self, answered: set[str]) -> dict[str, bool]:
        """Record one ping's answers; return every remembered worker and whether it is up."""
        now = self._clock()
        with self._lock:
            for name in answered:
                if name in self._last_seen or len(self._last_seen) < MAX_SERIES:
                    self._last_seen[name] = now
            for name, seen in list(self._last_seen.items()):
                if now - seen > self._forget_after_s:
                    del self._last_seen[name]
            return {name: name in answered for name in sorted(self._last_seen)}

    def collect(self) -> Iterator[Any]:
        """The gauge of one ping (``prometheus_client`` calls this on scrape)."""
        answered = self.ping()
        if answered is None:
            return
        up = GaugeMetricFamily(
            "celery_worker_up",
            "Whether a worker seen before answered this scrape's ping (1) or not (0).",
            labels=["hostname"],
        )
        for name, alive in self.observe(answered).items():
            up.add_metric([name], 1.0 if alive else 0.0)
        yield up
