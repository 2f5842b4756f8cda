"""The demo's flaky upstream: a quote service whose behaviour is scripted per order.

It keeps its script and call counts in a SQLite file, so that every worker process (and
the worker that replaces one that died) sees the same upstream, as they would a real one.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from xsm_celery.demo.shared_db import connect

__all__ = ["Behaviour", "FlakyUpstream", "MalformedQuote", "UpstreamTimeout"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS upstream (
    order_id   TEXT PRIMARY KEY,
    behaviour  TEXT NOT NULL,
    fail_times INTEGER NOT NULL DEFAULT 0,
    calls      INTEGER NOT NULL DEFAULT 0
);
"""


class UpstreamTimeout(ConnectionError):
    """The upstream did not answer in time: worth another attempt."""


class MalformedQuote(ValueError):
    """The upstream answered with nonsense: retrying cannot help."""


@dataclass(frozen=True)
class Behaviour:
    """How the upstream treats one order.

    ``kind`` is ``"ok"``, ``"flaky"`` (time out ``fail_times`` calls, then answer),
    ``"down"`` (always time out), ``"malformed"`` (answer nonsense) or ``"crash"`` (take
    the calling process down, as a segfaulting client library would).
    """

    kind: str
    fail_times: int = 0


class FlakyUpstream:
    """The scripted upstream, stored in ``path``."""

    def __init__(self, path: Path) -> None:
        self._conn = connect(path, _SCHEMA)
        self._lock = threading.Lock()

    def script(self, order_id: str, behaviour: Behaviour) -> None:
        """Set how the upstream treats ``order_id`` and reset its call count."""
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO upstream (order_id, behaviour, fail_times, calls) "
                "VALUES (?, ?, ?, 0)",
                (order_id, behaviour.kind, behaviour.fail_times),
            )

    def heal(self, order_id: str) -> None:
        """Fix the upstream for ``order_id``: every later call answers."""
        self.script(order_id, Behaviour("ok"))

    def calls(self, order_id: str) -> int:
        """How many times ``order_id`` was quoted."""
        with self._lock:
            row = self._conn.execute(
                "SELECT calls FROM upstream WHERE order_id = ?", (order_id,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def quote(self, order_id: str) -> float:
        """The price of ``order_id``, or the failure its script says.

        Raises:
            UpstreamTimeout: a flaky order's early calls, and every call of a down one.
            MalformedQuote: a malformed order.
        """
        with self._lock:
            row = self._conn.execute(
                "UPDATE upstream SET calls = calls + 1 WHERE order_id = ? "
                "RETURNING behaviour, fail_times, calls",
                (order_id,),
            ).fetchone()
        kind, fail_times, calls = row if row is not None else ("ok", 0, 1)
        if kind == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if kind == "down" or (kind == "flaky" and calls <= fail_times):
            raise UpstreamTimeout(f"quote service timed out for {order_id} (call {calls})")
        if kind == "malformed":
            raise MalformedQuote(f"quote for {order_id} has no price: {{'price': None}}")
        return round(10 + (sum(map(ord, order_id)) % 90) + 0.99, 2)
