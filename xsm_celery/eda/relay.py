"""The outbox relay: publish pending rows in order, mark them sent only once accepted.

Delivery is at least once: a relay that dies between the publish and the mark publishes
those rows again next time, and consumers dedup on the envelope id. Several relays may
drain one outbox: each leases a batch (``claim``) so two live relays never publish the
same row at once; a relay whose broker fails hands its unsent rows back (``release``), and
the rows of a relay that died come back when its lease expires.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Sequence

from xsm_celery.eda.broker import BatchPublisher, BrokerAdapter, SyncBrokerAdapter, maybe_await
from xsm_celery.errors import ConfigurationError
from xsm_celery.hooks import FactKind, emit, wants
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S, OutboxRecord, OutboxStore

__all__ = ["DEFAULT_BATCH", "OutboxRelay"]

logger = logging.getLogger(__name__)

#: Rows one ``relay_once`` publishes at most: the one relay batch default, used by the Celery
#: Beat relay and the Django relay command too (their settings override it).
DEFAULT_BATCH = 100


def _runs(rows: Sequence[OutboxRecord]) -> list[list[OutboxRecord]]:
    """Split rows into consecutive runs of one topic, keeping their order."""
    runs: list[list[OutboxRecord]] = []
    for row in rows:
        if runs and runs[-1][0].topic == row.topic:
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def _report(run: Sequence[OutboxRecord]) -> None:
    """One ``OUTBOX_RELAYED`` fact per published run of one topic, with the rows' traces."""
    if wants(FactKind.OUTBOX_RELAYED):
        parents = tuple(str(r.envelope.extensions.get("traceparent") or "") for r in run)
        emit(FactKind.OUTBOX_RELAYED, topic=run[0].topic, rows=len(run), traceparents=parents)


class OutboxRelay:
    """Publish an outbox's pending rows through a broker adapter.

    Args:
        store: An ``OutboxStore``; with ``claim`` / ``release`` rows are leased.
        broker: A sync or async broker adapter. With ``publish_many`` (sync adapters),
            runs of rows on one topic go out in one batched call.
        batch: Rows per ``relay_once`` at most.
        owner: The lease owner; default ``host:pid:id(relay)``. Give a stable name (the
            pod name) so a restarted relay takes its own leased rows back at once.
        lease_s: Seconds a claimed row stays this relay's; keep it well above the time
            one batch takes to publish.
        use_batches: Set False to publish one row per call even when the broker batches.
    """

    def __init__(
        self,
        store: OutboxStore,
        broker: SyncBrokerAdapter | BrokerAdapter,
        *,
        batch: int = DEFAULT_BATCH,
        owner: str | None = None,
        lease_s: float = DEFAULT_CLAIM_LEASE_S,
        use_batches: bool = True,
    ) -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigurationError(f"batch must be an int >= 1, got {batch!r}")
        if not lease_s > 0:
            raise ConfigurationError(f"lease_s must be > 0 seconds, got {lease_s!r}")
        self.store = store
        self.broker = broker
        self.batch = batch
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.lease_s = float(lease_s)
        self._leases = callable(getattr(store, "claim", None)) and callable(
            getattr(store, "release", None)
        )
        self._batch_publisher: BatchPublisher | None = (
            broker if use_batches and isinstance(broker, BatchPublisher) else None
        )

    def _take(self) -> list[OutboxRecord]:
        if self._leases:
            rows: list[OutboxRecord] = self.store.claim(self.batch, self.owner, self.lease_s)
            return rows
        pending: list[OutboxRecord] = self.store.pending(self.batch)
        return pending

    def _settle(self, rows: list[OutboxRecord], sent: int) -> None:
        """Mark the first ``sent`` rows sent and hand the rest back."""
        if sent:
            self.store.mark_sent([row.seq for row in rows[:sent]])
        if sent < len(rows) and self._leases:
            self.store.release([row.seq for row in rows[sent:]], self.owner)

    def relay_once_sync(self) -> int:
        """Publish one batch through a blocking adapter; return how many rows were sent.

        If the broker raises, the rows already accepted are marked sent, the rest are
        released to other relays, and the broker's exception propagates.
        """
        rows = self._take()
        sent = 0
        try:
            for run in _runs(rows):
                if self._batch_publisher is not None and len(run) > 1:
                    self._batch_publisher.publish_many(run[0].topic, [row.envelope for row in run])
                    sent += len(run)
                    _report(run)
                    continue
                for row in run:
                    self.broker.publish(row.topic, row.envelope)
                    sent += 1
                _report(run)
        except BaseException:
            self._log_failure(sent, len(rows))
            raise
        finally:
            self._settle(rows, sent)
        return sent

    async def relay_once(self) -> int:
        """Publish one batch through an async (or sync) adapter; return how many were sent.

        The store is blocking (a database, a file), so its claim and its settlement run in a
        worker thread: the event loop keeps serving other tasks while they wait on I/O.
        """
        rows = await asyncio.to_thread(self._take)
        sent = 0
        try:
            for row in rows:
                await maybe_await(self.broker.publish(row.topic, row.envelope))
                sent += 1
                _report([row])
        except BaseException:
            self._log_failure(sent, len(rows))
            raise
        finally:
            await asyncio.to_thread(self._settle, rows, sent)
        return sent

    def _log_failure(self, sent: int, taken: int) -> None:
        logger.warning(
            "outbox relay %s: publish failed after %d of %d rows; releasing the rest",
            self.owner,
            sent,
            taken,
        )

    def relay_all_sync(self, *, max_batches: int = 1000) -> int:
        """Run ``relay_once_sync`` until a batch comes back short; return the total sent."""
        total = 0
        for _ in range(max_batches):
            sent = self.relay_once_sync()
            total += sent
            if sent < self.batch:
                break
        return total

    def purge_sent(self, *, older_than_s: float = 86400.0) -> int:
        """Delete rows sent more than ``older_than_s`` seconds ago; return how many."""
        return int(self.store.purge_sent(older_than_s=older_than_s))

    def count(self, *, pending_only: bool = False) -> int:
        """Return the outbox's row count (only unsent rows with ``pending_only``)."""
        return int(self.store.count(pending_only=pending_only))
