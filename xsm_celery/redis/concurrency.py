"""Fleet-wide concurrency slots in Redis: leased, renewed while held, reclaimed when a holder dies.

A slot is an entry in a sorted set scored by its lease's end (Redis time). Acquiring first
drops every expired lease, so a slot held by a worker that was SIGKILLed comes back at most
``lease_s`` after its last renewal, never leaked. While a task runs, one daemon thread per
process (``LeaseRenewer``) renews every slot the process holds every ``lease_s / 3``, so a
task may run far longer than its lease.

``AIMD`` pools keep their limit in Redis too: each release reports how long the slot was
held and whether the work failed, and at most once per ``interval_s`` the fleet's limit goes
up by ``increase`` (a fast success) or is multiplied by ``decrease`` (an error, or a hold
over ``latency_target_ms``), between ``min_limit`` and ``max_limit``.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from dataclasses import dataclass

from xsm_celery.checks import CONCURRENCY_LIMIT, FLEET_LEASE_S
from xsm_celery.errors import StoreUnavailableError
from xsm_celery.patterns.limits.aimd import AimdParams
from xsm_celery.redis.fleet_store import FleetKey, FleetRedis
from xsm_celery.redis.rate_limit import Decision

__all__ = ["RENEWER", "AimdParams", "LeaseRenewer", "RedisSlots", "SlotLease", "new_holder"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SlotLease:
    """One held slot: which pool, which holder."""

    slots: RedisSlots
    holder: str


class RedisSlots:
    """A pool of ``limit`` slots (or an AIMD-adapted limit) shared by the fleet.

    Args:
        store: The fleet's Redis.
        name: The pool's name.
        limit: The fixed number of slots; ignored when ``aimd`` is given.
        lease_s: How long a slot outlives its holder's last renewal
            (``checks.FLEET_LEASE_S``: long enough for the renewal every ``lease_s / 3``).
        aimd: Adapt the limit instead of fixing it.
    """

    def __init__(
        self,
        store: FleetRedis,
        name: str,
        limit: int = 1,
        *,
        lease_s: float = 30.0,
        aimd: AimdParams | None = None,
    ) -> None:
        if aimd is None:
            limit = CONCURRENCY_LIMIT.check_int("limit", limit)
        lease_s = FLEET_LEASE_S.check("lease_s", lease_s)
        self.store = store
        self.key = FleetKey("slots", name)
        self.limit = limit
        self.aimd = aimd
        self.lease_ms = int(lease_s * 1000)
        self._keys = (
            store.key(self.key),
            store.key(self.key, ":meta"),
            store.index_key(self.key),
        )

    def try_acquire(self, holder: str | None = None) -> tuple[Decision, SlotLease | None]:
        """Take a slot for ``holder`` (a fresh id by default); the same holder gets it again.

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        holder = holder or new_holder()
        fixed = 0 if self.aimd else self.limit
        initial = self.aimd.initial if self.aimd else self.limit
        reply = self.store.run(
            "CONCURRENCY_ACQUIRE",
            self._keys,
            (holder, fixed, self.lease_ms, initial, self.key.member),
        )
        decision = Decision(bool(reply[0]), float(reply[1]), int(reply[2]))
        return decision, (SlotLease(self, holder) if decision.admitted else None)

    def renew(self, holders: list[str]) -> list[str]:
        """Extend the leases of ``holders``; returns those whose lease had already gone."""
        if not holders:
            return []
        lost = self.store.run("CONCURRENCY_RENEW", self._keys[:1], (self.lease_ms, *holders))
        return [h.decode() if isinstance(h, bytes) else str(h) for h in lost]

    def release(self, holder: str, held_ms: float, failed: bool) -> int:
        """Give the slot back and report the outcome; returns the pool's limit (AIMD: new)."""
        a = self.aimd or AimdParams()
        reply = self.store.run(
            "CONCURRENCY_RELEASE",
            self._keys[:2],
            (
                holder,
                int(held_ms),
                "1" if failed else "0",
                "1" if self.aimd else "0",
                a.initial,
                a.min_limit,
                a.max_limit,
                a.increase,
                repr(a.decrease),
                int(a.latency_target_ms),
                int(a.interval_s * 1000),
            ),
        )
        return int(reply[1]) if self.aimd else self.limit

    def state(self) -> dict[str, object]:
        """Slots held now and the limit in force (for operators)."""

        def read() -> tuple[int, dict[bytes, bytes]]:
            now_s, now_us = self.store.client.time()
            now = now_s * 1000 + now_us // 1000
            held = self.store.client.zcount(self._keys[0], now, "+inf")
            return int(held), self.store.client.hgetall(self._keys[1])

        held, meta = self.store.call(read)
        limit = int(meta.get(b"limit", self.aimd.initial if self.aimd else self.limit))
        out: dict[str, object] = {"held": held, "limit": limit, "lease_s": self.lease_ms / 1000}
        if self.aimd:
            out["adaptive"] = f"{self.aimd.min_limit}..{self.aimd.max_limit}"
        return out


def new_holder() -> str:
    """A holder id that names the process, so an operator can tell whose slot it is."""
    return f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:10]}"


class LeaseRenewer:
    """One daemon thread per process that renews every slot the process holds.

    It wakes every ``min lease / 3`` seconds. A renewal that finds the lease gone (the
    process stalled past its lease, or an operator reset the pool) logs a warning: the
    task keeps running, but its slot may have been given to another.
    """

    def __init__(self) -> None:
        self._held: dict[tuple[int, str], SlotLease] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def hold(self, lease: SlotLease) -> None:
        """Start renewing ``lease``."""
        with self._lock:
            self._held[(id(lease.slots), lease.holder)] = lease
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._loop, name="xsm-fleet-lease-renewer", daemon=True
                )
                self._thread.start()

    def drop(self, lease: SlotLease) -> None:
        """Stop renewing ``lease`` (before releasing it)."""
        with self._lock:
            self._held.pop((id(lease.slots), lease.holder), None)

    def held(self) -> list[SlotLease]:
        """The leases renewed now."""
        with self._lock:
            return list(self._held.values())

    def _loop(self) -> None:
        while True:
            leases = self.held()
            pause = min((lease.slots.lease_ms for lease in leases), default=3_000) / 3000.0
            self._wake.wait(max(0.05, pause))
            self.renew_now()

    def renew_now(self) -> None:
        """Renew every held lease once (the thread's body; callable from tests)."""
        pools: dict[int, tuple[RedisSlots, list[str]]] = {}
        for lease in self.held():
            pools.setdefault(id(lease.slots), (lease.slots, []))[1].append(lease.holder)
        for slots, holders in pools.values():
            try:
                lost = slots.renew(holders)
            except StoreUnavailableError as exc:
                logger.warning("could not renew fleet slots of %s: %s", slots.key.name, exc)
                continue
            for holder in lost:
                logger.warning(
                    "the lease of fleet slot %s held by %s ran out before it was renewed; "
                    "another task may now hold it",
                    slots.key.name,
                    holder,
                )

    def after_fork(self) -> None:
        """In a forked child: forget the parent's leases and its thread (not ours to renew)."""
        self._held = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = None


#: The renewer of this process.
RENEWER = LeaseRenewer()
os.register_at_fork(after_in_child=RENEWER.after_fork)
