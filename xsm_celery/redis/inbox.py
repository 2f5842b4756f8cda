"""``RedisInbox``: processed idempotency keys in Redis, shared by every consumer process.

Each entry is a hash (``fp``, ``receipt``, ``expires_at``) under
``<prefix>{scope:<scope>}\\x00<key>`` with a Redis TTL, so expired entries disappear by
themselves; the set ``<prefix>{scope:<scope>}`` lists a scope's entries for ``forget``. The
hash tag puts a scope's entries and its set in one slot, so the scripts that write both run
on a Redis Cluster (a scope's keys live on one node). ``claim`` is one Lua script
(check and create in one step), so two consumers racing for the same envelope id cannot
both win. Redis is not the snapshot store's transaction: the receipt is written right after
the snapshot is saved, and a crash between the two leaves an in-flight claim that blocks a
redelivery until the claim's TTL runs out; give ``ttl_s`` to the dispatcher's inbox plugin
(or keep the inbox in the snapshot store's database) when that window matters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from xsm_celery.persistence.inbox import expiry_time
from xsm_celery.persistence.protocols import InboxEntry
from xsm_celery.redis.connection import redis_client
from xsm_celery.redis.outages import redis_store_error

__all__ = ["DEFAULT_PREFIX", "RedisInbox"]

#: Prefix of every key the inbox writes.
DEFAULT_PREFIX = "xsm:inbox:"

_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'expires_at', ARGV[2])
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
redis.call('SADD', KEYS[2], KEYS[1])
return 1
"""

_MARK = """
redis.call('HSET', KEYS[1], 'receipt', ARGV[1], 'expires_at', ARGV[2])
if redis.call('HEXISTS', KEYS[1], 'fp') == 0 then redis.call('HSET', KEYS[1], 'fp', '') end
if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
    redis.call('PERSIST', KEYS[1])
end
redis.call('SADD', KEYS[2], KEYS[1])
return 1
"""

_RELEASE = """
if redis.call('HEXISTS', KEYS[1], 'receipt') == 0 then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisInbox:
    """An ``Inbox`` in Redis.

    Args:
        client: A ``redis.Redis`` client or a Redis URL (any spelling of ``redis_client``:
            ``redis://``, ``rediss://``, ``unix://``, ``sentinel://``).
        prefix: Prefix of every key (keep inboxes of different services apart).
        clock: Epoch-seconds clock used for ``expires_at`` (Redis' own TTL expires keys).
    """

    def __init__(
        self,
        client: redis.Redis[bytes] | str,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client: redis.Redis[bytes] = (
            redis_client(client) if isinstance(client, str) else client
        )
        self.prefix = prefix
        self._clock = clock
        self._claim = self.client.register_script(_CLAIM)
        self._mark = self.client.register_script(_MARK)
        self._release = self.client.register_script(_RELEASE)

    def _key(self, scope: str, key: str) -> str:
        return f"{self._index(scope)}\x00{key}"

    def _index(self, scope: str) -> str:
        # The tag's ``scope:`` keeps it non-empty (an empty ``{}`` is no tag) for any scope.
        return f"{self.prefix}{{scope:{scope}}}"

    def _expiry(self, ttl_s: float | None) -> tuple[str, int]:
        """``expires_at`` as stored ('' for never) and the TTL in ms (0 for none)."""
        expires_at = expiry_time(ttl_s, self._clock())
        if expires_at is None or ttl_s is None:
            return "", 0
        return repr(expires_at), max(int(float(ttl_s) * 1000), 1)

    def get(self, scope: str, key: str) -> InboxEntry | None:
        """Return the live entry for ``(scope, key)``, or ``None`` if unseen or expired."""
        raw = self._call("get", lambda: self.client.hgetall(self._key(scope, key)))
        if not raw or b"fp" not in raw:
            return None
        expires = raw.get(b"expires_at", b"").decode()
        expires_at = float(expires) if expires else None
        if expires_at is not None and expires_at <= self._clock():
            return None
        receipt = raw.get(b"receipt")
        return InboxEntry(raw[b"fp"].decode(), receipt.decode() if receipt else None, expires_at)

    def claim(self, scope: str, key: str, fingerprint: str, *, ttl_s: float | None) -> bool:
        """Record ``(scope, key)`` in flight unless a live entry exists; return whether it won."""
        expires_at, ttl_ms = self._expiry(ttl_s)
        keys = [self._key(scope, key), self._index(scope)]
        args = [fingerprint, expires_at, ttl_ms]
        return bool(self._call("claim", lambda: self._claim(keys=keys, args=args)))

    def mark(self, scope: str, key: str, receipt: str, *, ttl_s: float | None) -> None:
        """Store the receipt of ``(scope, key)``; the first fingerprint is kept."""
        expires_at, ttl_ms = self._expiry(ttl_s)
        keys = [self._key(scope, key), self._index(scope)]
        self._call("mark", lambda: self._mark(keys=keys, args=[receipt, expires_at, ttl_ms]))

    def release(self, scope: str, key: str) -> None:
        """Drop an in-flight claim so a redelivery can claim again; a receipt is kept."""
        self._call("release", lambda: self._release(keys=[self._key(scope, key)]))

    def purge_expired(self, *, now: float | None = None) -> int:
        """Nothing to do: Redis deletes expired entries itself; always returns 0."""
        return 0

    def forget(self, scope: str) -> int:
        """Delete every entry of ``scope``; return how many existed."""
        index = self._index(scope)

        def run() -> int:
            members = list(self.client.smembers(index))
            deleted = int(self.client.delete(*members)) if members else 0
            self.client.delete(index)
            return deleted

        return int(self._call("forget", run))

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except redis.RedisError as exc:
            raise redis_store_error(f"Redis inbox failed during {what}: {exc}", exc) from exc
