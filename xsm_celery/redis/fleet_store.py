"""``FleetRedis``: the one Redis connection the fleet limiters, slots and breakers share.

It owns the key layout, loads the Lua scripts once, and turns every connection or timeout
error into ``StoreUnavailableError``, so the Celery side can apply the option's Redis-down
choice instead of failing the task. The socket timeouts are short on purpose: an admission that
cannot reach Redis must give up in well under a second, not hold the worker slot.

The token bucket, the one call every rate-limited task makes, is packed once into its wire
bytes (``packed``) and sent on a pooled connection (``send``), which saves redis-py's
command building: about a fifth of a loopback round trip.

Keys are ``<prefix>{<bucket>}<kind>:<name>`` (plus companions such as ``:tail``), where the
bucket is one of ``INDEX_BUCKETS`` two-hex-digit hash tags chosen from the kind and name.
Each bucket has its own index sorted set, ``<prefix>{<bucket>}index``, listing the keys used
in it. A script call touches one key's state and its bucket's index, which share the tag,
so every call runs on one node of a Redis Cluster (no ``CROSSSLOT``), and listing the fleet
reads the ``INDEX_BUCKETS`` indexes in one pipeline instead of scanning the keyspace. The
layout is the same on one Redis and on a cluster, so a fleet can move between them.
"""

from __future__ import annotations

import hashlib
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from xsm_celery.checks import FLEET_PREFIX
from xsm_celery.errors import ConfigurationError, StoreUnavailableError
from xsm_celery.redis import scripts
from xsm_celery.redis.connection import redis_client

__all__ = [
    "DEFAULT_FLEET_PREFIX",
    "INDEX_BUCKETS",
    "INDEX_MAX_AGE_MS",
    "FleetKey",
    "FleetRedis",
    "PackedCall",
    "monotonic_ms",
]

#: Prefix of every key the fleet state writes.
DEFAULT_FLEET_PREFIX = "xsm:fleet:"

#: Keys not used for this long drop out of the index (their own TTLs expire the data).
INDEX_MAX_AGE_MS = 86_400_000

#: How many hash tags (and index sorted sets) the fleet's keys are spread over: enough for
#: the limits to spread evenly over a cluster's nodes, few enough to list in one pipeline.
INDEX_BUCKETS = 256

T = TypeVar("T")

_KINDS = ("rate", "window", "slots", "breaker")


class FleetKey:
    """Where one limiter, slot pool or breaker lives: its kind, its name and its bucket."""

    __slots__ = ("bucket", "kind", "name")

    def __init__(self, kind: str, name: str) -> None:
        if kind not in _KINDS:
            raise ConfigurationError(f"fleet key kind must be one of {_KINDS}, got {kind!r}")
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"fleet key name must be a non-empty string, got {name!r}")
        self.kind = kind
        self.name = name
        #: The hash tag shared by the key, its companions and its index (``"00"``-``"ff"``).
        self.bucket = f"{zlib.crc32(self.member.encode()) % INDEX_BUCKETS:02x}"

    @property
    def member(self) -> str:
        """The key's entry in the fleet index."""
        return f"{self.kind}\x00{self.name}"

    def __repr__(self) -> str:
        return f"FleetKey({self.kind!r}, {self.name!r})"


class PackedCall:
    """One script call with fixed keys and arguments, encoded once into its wire bytes.

    The hottest admission (a token bucket asked for one token) sends the same bytes every
    time; building, encoding and framing them costs about a fifth of a loopback round trip
    in redis-py, so ``FleetRedis.packed`` does it once and ``FleetRedis.send`` reuses them.
    ``chunks`` is empty for a client the fast path does not serve (``send`` then runs the
    script through ``execute_command``).
    """

    __slots__ = ("chunks", "name")

    def __init__(self, name: str, chunks: list[bytes]) -> None:
        self.name = name
        self.chunks = chunks


class FleetRedis:
    """Scripts, key names and error mapping over one ``redis.Redis`` client.

    Args:
        client: A ``redis.Redis`` client, or a Redis URL in any spelling of
            ``redis_client`` (``redis://``, ``rediss://``, ``unix://``, ``sentinel://``,
            ``redis+cluster://``), opened with 0.5 s socket timeouts (and, on a cluster,
            short retries) so a dead Redis is noticed quickly.
        prefix: Prefix of every key; keep two fleets on one Redis apart with it
            (``checks.FLEET_PREFIX``: non-empty, at most 64 characters, no whitespace).
    """

    def __init__(self, client: Any, *, prefix: str = DEFAULT_FLEET_PREFIX) -> None:
        FLEET_PREFIX.check("prefix", prefix)
        if isinstance(client, str):
            client = redis_client(client, socket_timeout=0.5, health_check_interval=0)
            if not isinstance(client, redis.Redis):
                # A cluster client retries a lost node with backoff for seconds by default;
                # an admission must give up as fast as on one Redis.
                client.retry = Retry(ExponentialBackoff(cap=0.1, base=0.01), 2)
        self.client: redis.Redis[bytes] = client
        self.prefix = prefix
        self._scripts: dict[str, str] = {}
        # The pooled fast path needs a plain pooled client; others go through execute_command.
        self._pool = (
            client.connection_pool
            if isinstance(client, redis.Redis) and getattr(client, "connection", None) is None
            else None
        )

    def index_key(self, fleet_key: FleetKey) -> str:
        """The sorted set listing the keys of ``fleet_key``'s bucket, scored by last use (ms)."""
        return self._index(fleet_key.bucket)

    def _index(self, bucket: str) -> str:
        return f"{self.prefix}{{{bucket}}}index"

    def key(self, fleet_key: FleetKey, suffix: str = "") -> str:
        """The Redis key of ``fleet_key`` (with a suffix for its companion keys)."""
        return f"{self.prefix}{{{fleet_key.bucket}}}{fleet_key.kind}:{fleet_key.name}{suffix}"

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run the script ``scripts.<name>`` (``EVALSHA``); one flushed by a restart is reloaded.

        It calls ``EVALSHA`` directly rather than through redis-py's ``Script`` object,
        which costs a quarter of a round trip in client time on every admission.
        """
        sha = self._scripts.get(name)
        try:
            if sha is None:
                sha = self._load(name)
            try:
                return self.client.execute_command("EVALSHA", sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                sha = self._load(name)
                return self.client.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError) as exc:
            mapped = _unavailable(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def packed(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> PackedCall:
        """The ``EVALSHA`` of ``scripts.<name>`` with these keys and arguments, pre-encoded.

        The script's SHA1 is computed here, so packing needs no round trip (the pool's
        connection may connect); the script is loaded by the first ``send`` that finds it
        missing.

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        if self._pool is None:
            return PackedCall(name, [])
        sha = hashlib.sha1(getattr(scripts, name).encode()).hexdigest()
        command = ("EVALSHA", sha, len(keys), *keys, *args)
        pool = self._pool

        def pack() -> PackedCall:
            conn = pool.get_connection()
            try:
                return PackedCall(name, list(conn.pack_command(*command)))
            finally:
                pool.release(conn)

        return self.call(pack)

    def send(self, call: PackedCall, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run a packed call: its bytes on a pooled connection, with redis-py's own retries.

        It skips ``execute_command`` (argument encoding, framing, response callbacks and
        redis-py's per-command metrics) and nothing else: the connection comes from and
        goes back to the client's pool, a broken one is dropped and retried by the
        connection's ``Retry``, and a script flushed by a restart is reloaded. ``keys`` and
        ``args`` are what ``call`` was packed from, used only where the fast path does not
        apply (a single-connection or non-``redis.Redis`` client).
        """
        pool = self._pool
        if pool is None:
            return self.run(call.name, keys, args)
        chunks = call.chunks
        try:
            conn = pool.get_connection()
            try:

                def once() -> Any:
                    conn.send_packed_command(chunks)
                    return conn.read_response()

                try:
                    return conn.retry.call_with_retry(once, lambda _error: conn.disconnect())
                except redis.exceptions.NoScriptError:
                    self._load(call.name)
                    return conn.retry.call_with_retry(once, lambda _error: conn.disconnect())
            finally:
                pool.release(conn)
        except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError) as exc:
            mapped = _unavailable(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def _load(self, name: str) -> str:
        raw = self.client.execute_command("SCRIPT", "LOAD", getattr(scripts, name))
        sha = raw.decode() if isinstance(raw, bytes) else str(raw)
        self._scripts[name] = sha
        return sha

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` against Redis, turning an outage into ``StoreUnavailableError``."""
        try:
            return fn()
        except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError) as exc:
            mapped = _unavailable(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def indexed(self) -> list[tuple[FleetKey, float]]:
        """Every fleet key used within ``INDEX_MAX_AGE_MS``, with its last use (epoch s)."""

        def read() -> list[tuple[bytes, float]]:
            now_s, now_us = self.client.time()
            cutoff = now_s * 1000 + now_us // 1000 - INDEX_MAX_AGE_MS
            # Not a transaction: a cluster pipeline sends each node its own indexes.
            pipe = self.client.pipeline(transaction=False)
            for bucket in range(INDEX_BUCKETS):
                index = self._index(f"{bucket:02x}")
                pipe.zremrangebyscore(index, "-inf", cutoff)
                pipe.zrange(index, 0, -1, withscores=True)
            replies = pipe.execute()
            return [entry for reply in replies[1::2] for entry in reply]

        found: list[tuple[FleetKey, float]] = []
        for member, score in self.call(read):
            kind, _, name = member.decode().partition("\x00")
            if kind in _KINDS and name:
                found.append((FleetKey(kind, name), score / 1000.0))
        return found

    def forget(self, fleet_key: FleetKey, *suffixes: str) -> int:
        """Delete a key's state and its index entry; returns how many Redis keys went."""

        def delete() -> int:
            # One DEL per key: a cluster pipeline refuses a multi-key DEL.
            pipe = self.client.pipeline(transaction=False)
            for suffix in ("", *suffixes):
                pipe.delete(self.key(fleet_key, suffix))
            pipe.zrem(self.index_key(fleet_key), fleet_key.member)
            return sum(int(n) for n in pipe.execute()[:-1])

        return self.call(delete)

    def server_time(self) -> float:
        """Redis' own clock, in epoch seconds."""
        now_s, now_us = self.call(self.client.time)
        return float(now_s) + float(now_us) / 1_000_000


def _unavailable(exc: BaseException) -> BaseException:
    """``StoreUnavailableError`` for an outage; any other Redis error is returned as it is."""
    if isinstance(exc, redis.ResponseError):
        if "LOADING" not in str(exc) and "MASTERDOWN" not in str(exc):
            return exc
        return StoreUnavailableError(
            f"the fleet state's Redis is not serving yet ({exc}); it is loading or failing "
            "over, and the call will be retried"
        )
    return StoreUnavailableError(
        f"the fleet state's Redis is unreachable ({type(exc).__name__}: {exc}); check "
        "app.conf.xsm_redis_url and that Redis is running"
    )


def monotonic_ms() -> float:
    """This process's monotonic clock in ms, for durations only (never shared)."""
    return time.monotonic() * 1000.0
