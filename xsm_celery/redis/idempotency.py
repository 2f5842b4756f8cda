"""``RedisIdempotencyStore``: ``@idempotent`` keys shared by every worker of a fleet.

One string per key under ``<prefix><key>``: ``c:<token>`` while claimed, ``d:<result>``
once done, with a Redis TTL for both, so a dead holder's claim and an old result expire
by themselves. ``claim`` is ``SET NX PX`` and, when the key exists, a read of it in the
same Lua script (one round trip, nothing can change in between); ``complete`` and
``release`` compare the token first, so a holder whose claim expired cannot overwrite the
next holder's claim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from xsm_celery.errors import StoreUnavailableError
from xsm_celery.patterns.idempotency import Claim, check_ttl
from xsm_celery.redis.connection import redis_client

__all__ = ["DEFAULT_IDEMPOTENCY_PREFIX", "RedisIdempotencyStore"]

#: Prefix of every key the store writes.
DEFAULT_IDEMPOTENCY_PREFIX = "xsm:idem:"

_CLAIM = """
local mine = 'c:' .. ARGV[1]
if redis.call('SET', KEYS[1], mine, 'NX', 'PX', ARGV[2]) then return {1, ''} end
local value = redis.call('GET', KEYS[1])
if value == false or value == mine then
    redis.call('SET', KEYS[1], mine, 'PX', ARGV[2])
    return {1, ''}
end
return {0, value, redis.call('PTTL', KEYS[1])}
"""

_COMPLETE = """
if redis.call('GET', KEYS[1]) ~= 'c:' .. ARGV[1] then return 0 end
if tonumber(ARGV[3]) > 0 then
    redis.call('SET', KEYS[1], 'd:' .. ARGV[2], 'PX', ARGV[3])
else
    redis.call('SET', KEYS[1], 'd:' .. ARGV[2])
end
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) ~= 'c:' .. ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
"""


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class RedisIdempotencyStore:
    """An ``IdempotencyStore`` in Redis.

    Args:
        client: A ``redis.Redis`` client or a Redis URL (any spelling of ``redis_client``:
            ``redis://``, ``rediss://``, ``unix://``, ``sentinel://``).
        prefix: Prefix of every key (keep services apart).
    """

    def __init__(
        self, client: redis.Redis[bytes] | str, *, prefix: str = DEFAULT_IDEMPOTENCY_PREFIX
    ) -> None:
        self.client: redis.Redis[bytes] = (
            redis_client(client) if isinstance(client, str) else client
        )
        self.prefix = prefix
        self._claim = self.client.register_script(_CLAIM)
        self._complete = self.client.register_script(_COMPLETE)
        self._release = self.client.register_script(_RELEASE)

    def claim(self, key: str, token: str, claim_ttl_s: float) -> Claim:
        """Claim ``key`` unless it is done or held by a live claim (one round trip)."""
        ttl = check_ttl("claim_ttl_s", claim_ttl_s, allow_none=False)
        assert ttl is not None
        reply = self._call(
            "claim", lambda: self._claim(keys=[self.prefix + key], args=[token, _ms(ttl)])
        )
        if int(reply[0]) == 1:
            return Claim("claimed")
        value = bytes(reply[1]).decode()
        if value.startswith("d:"):
            return Claim("done", result=value[2:])
        return Claim("in_progress", retry_after_s=max(0, int(reply[2])) / 1000.0)

    def complete(self, key: str, token: str, result: str, ttl_s: float | None) -> bool:
        """Store ``result`` if ``token`` still holds the claim."""
        ttl = check_ttl("ttl_s", ttl_s, allow_none=True)
        args = [token, result, 0 if ttl is None else _ms(ttl)]
        return bool(
            self._call("complete", lambda: self._complete(keys=[self.prefix + key], args=args))
        )

    def release(self, key: str, token: str) -> bool:
        """Drop ``token``'s claim; a stored result is kept."""
        return bool(
            self._call("release", lambda: self._release(keys=[self.prefix + key], args=[token]))
        )

    def forget(self, key: str) -> bool:
        """Delete ``key``'s claim or result."""
        return bool(self._call("forget", lambda: self.client.delete(self.prefix + key)))

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except redis.RedisError as exc:
            raise StoreUnavailableError(
                f"Redis idempotency store unavailable during {what}: {exc}; nothing ran, "
                "retry the call once Redis is back"
            ) from exc
