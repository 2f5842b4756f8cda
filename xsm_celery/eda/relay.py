"""The outbox relay: publish pending rows in order, mark them sent only once accepted.

Delivery is at least once: a relay that dies between the publish and the mark publishes
those rows again next time, and consumers dedup on the envelope id. Several relays may
drain one outbox: each leases a batch (``claim``) so two live relays never publish the
same row at once; a relay whose broker fails hands its unsent rows back (``release``), and
the rows of a relay that died come back when its lease expires.

A failed publish is one of two things (``is_broker_outage`` decides). An outage (the broker
down or unreachable) hands the rows back without counting: nothing is wrong with them. A
refusal of one row (a channel error, an envelope the adapter cannot encode) is counted on
that row; below ``max_attempts`` the row is handed back and the batch stops there, so order
is kept; at ``max_attempts`` the row is set aside as failed and the rows after it go out,
so one bad row never blocks the outbox for ever.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Sequence

from xsm_celery.eda.broker import BatchPublisher, BrokerAdapter, SyncBrokerAdapter, maybe_await
from xsm_celery.eda.outages import is_broker_outage
from xsm_celery.eda.outbox_protocols import OutboxRecord, OutboxStore
from xsm_celery.errors import ConfigurationError
from xsm_celery.hooks import FactKind, emit, wants
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S

__all__ = ["DEFAULT_BATCH", "DEFAULT_MAX_ATTEMPTS", "OutboxRelay"]

logger = logging.getLogger(__name__)

#: Rows one ``relay_once`` publishes at most: the one relay batch default, used by the Celery
#: Beat relay and the Django relay command too (their settings override it).
DEFAULT_BATCH = 100
#: Refusals of one row before it is set aside as failed (outages are never counted).
DEFAULT_MAX_ATTEMPTS = 5


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
    if run and wants(FactKind.OUTBOX_RELAYED):
        parents = tuple(str(r.envelope.extensions.get("traceparent") or "") for r in run)
        emit(FactKind.OUTBOX_RELAYED, topic=run[0].topic, rows=len(run), traceparents=parents)


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class _Progress:
    """What one batch did so far: rows accepted, and rows settled otherwise (set aside)."""

    __slots__ = ("rows", "sent", "set_aside")

    def __init__(self, rows: list[OutboxRecord]) -> None:
        self.rows = rows
        self.sent: list[int] = []
        self.set_aside: set[int] = set()

    def unsent(self) -> list[int]:
        """Rows to hand back: neither accepted nor set aside."""
        done = {*self.sent, *self.set_aside}
        return [row.seq for row in self.rows if row.seq not in done]


class OutboxRelay:
    """Publish an outbox's pending rows through a broker adapter.

    Args:
        store: An ``OutboxStore``; with ``claim`` / ``release`` rows are leased, with
            ``record_refusal`` refusals are counted and a row refused ``max_attempts``
            times is set aside as failed.
        broker: A sync or async broker adapter. With ``publish_many`` (sync adapters),
            runs of rows on one topic go out in one batched call.
        batch: Rows per ``relay_once`` at most.
        owner: The lease owner; default ``host:pid:id(relay)``. Give a stable name (the
            pod name) so a restarted relay takes its own leased rows back at once.
        lease_s: Seconds a claimed row stays this relay's; keep it well above the time
            one batch takes to publish.
        use_batches: Set False to publish one row per call even when the broker batches.
        max_attempts: Refusals of one row (never outages) before it is set aside as failed
            and the rows after it go on.
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
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigurationError(f"batch must be an int >= 1, got {batch!r}")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
        if not lease_s > 0:
            raise ConfigurationError(f"lease_s must be > 0 seconds, got {lease_s!r}")
        self.store = store
        self.broker = broker
        self.batch = batch
        self.max_attempts = max_attempts
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.lease_s = float(lease_s)
        self._leases = callable(getattr(store, "claim", None)) and callable(
            getattr(store, "release", None)
        )
        self._counts = callable(getattr(store, "record_refusal", None))
        self._batch_publisher: BatchPublisher | None = (
            broker if use_batches and isinstance(broker, BatchPublisher) else None
        )

    def _take(self) -> list[OutboxRecord]:
        if self._leases:
            rows: list[OutboxRecord] = self.store.claim(self.batch, self.owner, self.lease_s)
            return rows
        pending: list[OutboxRecord] = self.store.pending(self.batch)
        return pending

    def _settle(self, progress: _Progress) -> None:
        """Mark the accepted rows sent and hand the rest back (set-aside rows excepted)."""
        if progress.sent:
            self.store.mark_sent(progress.sent)
        unsent = progress.unsent()
        if unsent and self._leases:
            self.store.release(unsent, self.owner)

    def _set_aside(self, row: OutboxRecord, exc: Exception) -> bool:
        """Count a refusal of ``row``; True when it is now failed and the batch goes on.

        False (the caller re-raises ``exc``, the batch stops and order is kept) below the
        limit, when the store cannot count, or when the row is no longer this relay's.
        """
        if not self._counts:
            return False
        error = _error_text(exc)
        attempts = int(
            self.store.record_refusal(row.seq, self.owner, error, max_attempts=self.max_attempts)
        )
        if 0 < attempts < self.max_attempts:
            logger.warning(
                "outbox relay %s: the broker refused row %d on %r (attempt %d of %d): %s",
                self.owner,
                row.seq,
                row.topic,
                attempts,
                self.max_attempts,
                error,
            )
        if attempts < self.max_attempts:
            return False
        logger.error(
            "outbox relay %s: row %d on %r (envelope %s) set aside as failed after %d "
            "refusals: %s; fix the cause, then requeue it (store.requeue(%d))",
            self.owner,
            row.seq,
            row.topic,
            row.envelope.id,
            attempts,
            error,
            row.seq,
        )
        emit(
            FactKind.OUTBOX_ROW_FAILED,
            topic=row.topic,
            seq=row.seq,
            envelope_id=row.envelope.id,
            attempts=attempts,
            error_type=type(exc).__name__,
        )
        return True

    def relay_once_sync(self) -> int:
        """Publish one batch through a blocking adapter; return how many rows were sent.

        If the broker is down, the rows already accepted are marked sent, the rest are
        released to other relays, and the exception propagates. If it refuses a row, the
        row is counted: below ``max_attempts`` the batch stops there and the exception
        propagates; at ``max_attempts`` the row is set aside and the batch goes on.
        """
        return self._relay_sync()[0]

    def _relay_sync(self) -> tuple[int, int]:
        """One batch; returns (rows sent, rows taken)."""
        progress = _Progress(self._take())
        try:
            for run in _runs(progress.rows):
                batched = self._batch_publisher is not None and len(run) > 1
                if batched and self._publish_run(run, progress):
                    continue
                accepted: list[OutboxRecord] = []
                for row in run:
                    try:
                        self.broker.publish(row.topic, row.envelope)
                    except Exception as exc:
                        if is_broker_outage(exc) or not self._set_aside(row, exc):
                            _report(accepted)
                            raise
                        progress.set_aside.add(row.seq)
                        continue
                    progress.sent.append(row.seq)
                    accepted.append(row)
                _report(accepted)
        except BaseException:
            self._log_failure(len(progress.sent), len(progress.rows))
            raise
        finally:
            self._settle(progress)
        return len(progress.sent), len(progress.rows)

    def _publish_run(self, run: list[OutboxRecord], progress: _Progress) -> bool:
        """Publish a run of one topic in one call; False to publish it row by row instead.

        A refusal of the batched call does not say which row was refused, so the run is
        published again one row at a time and only the bad row is counted. Rows of the
        refused call the broker did take are then published twice; consumers dedup.
        """
        assert self._batch_publisher is not None
        try:
            self._batch_publisher.publish_many(run[0].topic, [row.envelope for row in run])
        except Exception as exc:
            if is_broker_outage(exc):
                raise
            logger.warning(
                "outbox relay %s: the broker refused a batch of %d rows on %r (%s); "
                "publishing them one by one to find the refused row",
                self.owner,
                len(run),
                run[0].topic,
                _error_text(exc),
            )
            return False
        progress.sent.extend(row.seq for row in run)
        _report(run)
        return True

    async def relay_once(self) -> int:
        """Publish one batch through an async (or sync) adapter; return how many were sent.

        Failures are handled as in ``relay_once_sync``. The store is blocking (a database,
        a file), so its claim, its counting and its settlement run in a worker thread: the
        event loop keeps serving other tasks while they wait on I/O.
        """
        return (await self._relay_async())[0]

    async def _relay_async(self) -> tuple[int, int]:
        progress = _Progress(await asyncio.to_thread(self._take))
        try:
            for row in progress.rows:
                try:
                    await maybe_await(self.broker.publish(row.topic, row.envelope))
                except Exception as exc:
                    if is_broker_outage(exc):
                        raise
                    if not await asyncio.to_thread(self._set_aside, row, exc):
                        raise
                    progress.set_aside.add(row.seq)
                    continue
                progress.sent.append(row.seq)
                _report([row])
        except BaseException:
            self._log_failure(len(progress.sent), len(progress.rows))
            raise
        finally:
            await asyncio.to_thread(self._settle, progress)
        return len(progress.sent), len(progress.rows)

    def _log_failure(self, sent: int, taken: int) -> None:
        logger.warning(
            "outbox relay %s: publish failed after %d of %d rows; releasing the rest",
            self.owner,
            sent,
            taken,
        )

    def relay_all_sync(self, *, max_batches: int = 1000) -> int:
        """Run ``relay_once_sync`` until a batch comes back short; return the total sent.

        A batch is short when the store had fewer rows to give, not when rows in it were
        set aside: the rows after a failed row go out in the same call.
        """
        total = 0
        for _ in range(max_batches):
            sent, taken = self._relay_sync()
            total += sent
            if taken < self.batch:
                break
        return total

    def purge_sent(self, *, older_than_s: float = 86400.0) -> int:
        """Delete rows sent more than ``older_than_s`` seconds ago; return how many."""
        return int(self.store.purge_sent(older_than_s=older_than_s))

    def count(self, *, pending_only: bool = False) -> int:
        """Return the outbox's row count (only pending rows, not failed ones, if asked)."""
        return int(self.store.count(pending_only=pending_only))
