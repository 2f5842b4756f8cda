"""Fleet-wide rate limits in Redis: a token bucket (the default) and a sliding window.

Both answer in one script call: admitted, or the number of milliseconds until this caller
should come back. The bucket refills from Redis' own clock, so every worker spends from
the same tokens however far its clock drifts.

The bucket allows ``burst`` calls at once and ``rate`` per second after that; the sliding
window allows at most ``limit`` calls in any ``window_s`` stretch, which is stricter at the
edges and costs one sorted-set entry per admitted call (use it for small limits).
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from xsm_celery.checks import BURST, SLIDING_LIMIT, check_rate
from xsm_celery.redis.fleet_store import FleetKey, FleetRedis, PackedCall

__all__ = ["Decision", "RedisSlidingWindow", "RedisTokenBucket", "level_at"]

#: Packed calls a bucket keeps (one per cost and reservation bound it is asked with).
_MAX_PACKED = 8


def level_at(
    tokens: float, stamped_ms: float, now_ms: float, rate_per_ms: float, burst: float
) -> tuple[float, float]:
    """A bucket's level at ``now_ms``: ``(tokens available, tokens reserved)``, both >= 0.

    The stored level is the one of the last admission; the bucket refills between
    admissions without a write, so a reader must refill it to the moment it reads (as the
    script does before deciding), or a quiet bucket reads empty forever. Below zero the
    stored level counts tokens promised to deferred callers: that is shown as reserved,
    never as a negative count.
    """
    elapsed = max(0.0, now_ms - stamped_ms)
    level = min(float(burst), tokens + elapsed * max(0.0, rate_per_ms))
    return max(0.0, level), max(0.0, -level)


class Decision(NamedTuple):
    """What a limiter said: admitted, or come back in ``wait_ms``.

    A named tuple: one is built per admission, on the path every limited task takes.
    """

    admitted: bool
    #: Milliseconds until a token (or a window place) is expected for this caller.
    wait_ms: float
    #: Tokens left after the decision (bucket) or places used (window).
    level: int
    #: The bucket reserved a token for this caller, due in ``wait_ms``: it must not ask
    #: again, only wait (or be deferred by that long) and run.
    reserved: bool = False


class RedisTokenBucket:
    """A token bucket shared by every process that uses the same Redis and name.

    Args:
        store: The fleet's Redis.
        name: The bucket's name (a task name, or a task name and a key such as a customer).
        rate: Tokens per ``per`` seconds.
        per: The period of ``rate`` in seconds.
        burst: Bucket size: calls admitted at once after a quiet spell (default: ``rate``,
            at least 1, at most ``checks.BURST``'s ceiling).

    Raises:
        ConfigurationError: The rate, period or burst is outside its range in
            ``xsm_celery.checks``.
    """

    def __init__(
        self, store: FleetRedis, name: str, rate: float, per: float = 1.0, burst: int | None = None
    ) -> None:
        self.store = store
        self.key = FleetKey("rate", name)
        self.rate, self.per = check_rate(rate, per, per_name="per")
        self.burst = (
            min(max(1, int(self.rate)), int(BURST.high))
            if burst is None
            else BURST.check_int("burst", burst)
        )
        self._keys = (store.key(self.key), store.index_key(self.key))
        # Encoded once: redis-py would encode these constant arguments on every call.
        self._rate_args = (repr(self.rate / (self.per * 1000.0)).encode(), str(self.burst).encode())
        self._member = self.key.member.encode()
        self._packed: dict[tuple[int, int], PackedCall] = {}

    def try_acquire(self, cost: int = 1, *, reserve_max_ms: float = 0.0) -> Decision:
        """Take ``cost`` tokens if they are there; otherwise say when to come back.

        With ``reserve_max_ms`` a caller whose tokens are due within that many ms gets them
        reserved (``Decision.reserved``): they are its own once ``wait_ms`` has passed.

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        shape = (cost, int(reserve_max_ms))
        args = (*self._rate_args, *shape, self._member)
        packed = self._packed.get(shape)
        if packed is None:
            if len(self._packed) >= _MAX_PACKED:
                self._packed.clear()
            packed = self._packed[shape] = self.store.packed("TOKEN_BUCKET", self._keys, args)
        reply = self.store.send(packed, self._keys, args)
        if isinstance(reply, int):
            return Decision(True, 0.0, reply)
        return Decision(False, float(reply[1]), int(reply[2]), reserved=int(reply[0]) == 2)

    def state(self) -> dict[str, object]:
        """Tokens available now (refilled to Redis' clock) and reserved (for operators)."""
        client = self.store.client

        def read() -> tuple[Any, dict[bytes, bytes]]:
            return client.time(), client.hgetall(self._keys[0])

        (now_s, now_us), raw = self.store.call(read)
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        now_ms = int(now_s) * 1000 + int(now_us) // 1000
        tokens, reserved = level_at(
            float(fields.get("tokens", self.burst)),
            float(fields.get("ts", now_ms)),
            now_ms,
            self.rate / (self.per * 1000.0),
            self.burst,
        )
        return {
            "tokens": round(tokens, 2),
            "reserved": round(reserved, 2),
            "burst": self.burst,
            "rate": f"{self.rate:g}/{self.per:g}s",
        }


class RedisSlidingWindow:
    """At most ``limit`` admissions in any ``window_s`` seconds, across the fleet."""

    def __init__(self, store: FleetRedis, name: str, limit: int, window_s: float = 1.0) -> None:
        self.store = store
        self.key = FleetKey("window", name)
        self.limit = SLIDING_LIMIT.check_int("limit", limit)
        _count, per = check_rate(limit, window_s, name="limit", per_name="window_s")
        self.window_ms = per * 1000.0
        self._keys = (
            store.key(self.key),
            store.key(self.key, ":tail"),
            store.index_key(self.key),
        )

    def try_acquire(self, cost: int = 1, *, spread: bool = True) -> Decision:
        """Take ``cost`` places in the window if they are free; otherwise say when to come back.

        With ``spread`` (for deferred tasks) each refusal is given a later moment than the
        one before, so deferred callers do not all come back at once; without it the
        refusal reports when the window itself frees enough places.

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        member = uuid.uuid4().hex[:12]
        reply = self.store.run(
            "SLIDING_WINDOW",
            self._keys,
            (
                self.limit,
                int(self.window_ms),
                member,
                int(cost),
                "1" if spread else "0",
                self.key.member,
            ),
        )
        return Decision(bool(reply[0]), float(reply[1]), int(reply[2]))

    def state(self) -> dict[str, object]:
        """Places used in the current window (for operators)."""
        used = self.store.call(lambda: self.store.client.zcard(self._keys[0]))
        return {"used": int(used), "limit": self.limit, "window_s": self.window_ms / 1000.0}
