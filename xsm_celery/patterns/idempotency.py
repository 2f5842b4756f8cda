"""``@idempotent``: run a call once per key, and answer repeats with the stored result.

Celery delivers at least once: a task can run twice (a redelivery after a lost worker, a
client that retried its ``delay()``). ``@idempotent`` makes the side effect happen once
per key: the first caller *claims* the key, runs, and stores the result; a later caller
with the same key gets that result without running; a caller arriving while the first
is still running gets ``IdempotencyInProgressError`` (retry it later: a Celery task can
``self.retry(countdown=err.retry_after_s)``).

A failure is not remembered: the claim is released so the next attempt runs for real. A
claim has its own TTL, so a caller that died mid-call blocks the key only that long.
The stores (memory here, Redis in ``xsm_celery.redis``, SQL in ``xsm_celery.sqlalchemy``)
share ``IdempotencyStore``, and one contract suite holds them to the same behaviour.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, Protocol, TypeVar, cast, runtime_checkable

from xsm_celery.checks import POSITIVE_SECONDS
from xsm_celery.engine import Clock, WallClock
from xsm_celery.errors import ArgumentTypeError, IdempotencyInProgressError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.wrapping import wrap_calls

__all__ = [
    "Claim",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "check_ttl",
    "default_key",
    "idempotent",
]

P = ParamSpec("P")
T = TypeVar("T")

_log = logging.getLogger(__name__)

#: How long a finished result is kept by default: one day.
DEFAULT_TTL_S = 86_400.0

#: How long a claim blocks its key if its holder never finishes: five minutes.
DEFAULT_CLAIM_TTL_S = 300.0


def check_ttl(name: str, value: object, *, allow_none: bool) -> float | None:
    """``value`` as seconds > 0 (None allowed when ``allow_none``: keep for ever)."""
    if value is None and allow_none:
        return None
    return POSITIVE_SECONDS.require(name, value)


@dataclass(frozen=True, slots=True)
class Claim:
    """A store's answer to ``claim``.

    ``status`` is ``"claimed"`` (the caller owns the key and must run), ``"done"``
    (``result`` holds the stored, serialised result) or ``"in_progress"`` (another holder
    runs it; ``retry_after_s`` is when that claim expires at the latest).
    """

    status: Literal["claimed", "done", "in_progress"]
    result: str | None = None
    retry_after_s: float = 0.0


@runtime_checkable
class IdempotencyStore(Protocol):
    """Where idempotency keys and results live. Every method is one atomic step.

    ``token`` is a random id the caller draws per call; only the holder of the current
    claim's token can complete or release it, so a holder whose claim expired (and was
    taken over) cannot overwrite the new holder's work. A store that cannot reach its
    service raises ``StoreUnavailableError``.
    """

    def claim(self, key: str, token: str, claim_ttl_s: float) -> Claim:
        """Claim ``key`` for ``token`` unless it is done or claimed by a live holder.

        An expired claim (its holder died) is taken over; so is an expired result.
        """
        ...

    def complete(self, key: str, token: str, result: str, ttl_s: float | None) -> bool:
        """Store ``result`` for ``key`` if ``token`` still holds the claim; keep it ``ttl_s``.

        Returns False (and stores nothing) when the claim was lost. ``ttl_s`` None keeps
        the result until ``forget``.
        """
        ...

    def release(self, key: str, token: str) -> bool:
        """Drop ``token``'s claim so the key can run again; a stored result is never dropped."""
        ...

    def forget(self, key: str) -> bool:
        """Operator override: delete ``key``'s claim or result; True if there was one."""
        ...


class MemoryIdempotencyStore:
    """An ``IdempotencyStore`` in this process's memory, behind one lock.

    Args:
        clock: The engine clock for TTLs; a ``SimulatedClock`` in tests.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock: Clock = WallClock() if clock is None else clock
        self._lock = threading.Lock()
        #: key -> (status, token or result, expires_at_s or None)
        self._entries: dict[str, tuple[str, str, float | None]] = {}

    def claim(self, key: str, token: str, claim_ttl_s: float) -> Claim:
        """Claim ``key`` unless it is done or held by a live claim."""
        ttl = check_ttl("claim_ttl_s", claim_ttl_s, allow_none=False)
        assert ttl is not None
        now = self._now_s()
        with self._lock:
            entry = self._live(key, now)
            if entry is None or (entry[0] == "claimed" and entry[1] == token):
                self._entries[key] = ("claimed", token, now + ttl)
                return Claim("claimed")
            status, value, expires = entry
            if status == "done":
                return Claim("done", result=value)
            return Claim("in_progress", retry_after_s=max(0.0, (expires or now) - now))

    def complete(self, key: str, token: str, result: str, ttl_s: float | None) -> bool:
        """Store ``result`` if ``token`` still holds the claim."""
        ttl = check_ttl("ttl_s", ttl_s, allow_none=True)
        now = self._now_s()
        with self._lock:
            entry = self._live(key, now)
            if entry is None or entry[:2] != ("claimed", token):
                return False
            self._entries[key] = ("done", result, None if ttl is None else now + ttl)
            return True

    def release(self, key: str, token: str) -> bool:
        """Drop ``token``'s claim; results are kept."""
        with self._lock:
            entry = self._live(key, self._now_s())
            if entry is None or entry[:2] != ("claimed", token):
                return False
            del self._entries[key]
            return True

    def forget(self, key: str) -> bool:
        """Delete ``key``'s claim or result."""
        with self._lock:
            return self._entries.pop(key, None) is not None

    def _now_s(self) -> float:
        return self._clock.now() / 1000.0

    def _live(self, key: str, now: float) -> tuple[str, str, float | None] | None:
        entry = self._entries.get(key)
        if entry is not None and entry[2] is not None and entry[2] <= now:
            del self._entries[key]
            return None
        return entry


def default_key(*args: Any, **kwargs: Any) -> str:
    """A digest of the JSON form of the arguments; refuses arguments JSON cannot hold.

    Raises:
        TypeError: An argument is not JSON-serialisable; pass ``key=`` to choose the key.
    """
    try:
        text = json.dumps([args, kwargs], sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(
            f"@idempotent cannot derive a key from these arguments ({exc}); pass "
            "key=lambda *args, **kwargs: ... returning a string"
        ) from exc
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _Guard:
    """The claim / run / complete steps one decorated function repeats per call."""

    store: IdempotencyStore
    name: str
    key: Callable[..., str]
    ttl_s: float | None
    claim_ttl_s: float
    dumps: Callable[[Any], str]
    loads: Callable[[str], Any]

    def begin(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str, Claim]:
        chosen = self.key(*args, **kwargs)
        if not isinstance(chosen, str) or not chosen:
            raise ArgumentTypeError(
                f"the key function of {self.name!r} must return a non-empty str"
            )
        full_key, token = f"{self.name}:{chosen}", uuid.uuid4().hex
        claim = self.store.claim(full_key, token, self.claim_ttl_s)
        if claim.status == "in_progress":
            raise IdempotencyInProgressError(full_key, retry_after_s=claim.retry_after_s)
        if claim.status == "done":
            emit(FactKind.IDEMPOTENT_REPLAYED, call=self.name)
        return full_key, token, claim

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` once for its key; a repeat gets the stored result."""
        full_key, token, claim = self.begin(args, kwargs)
        if claim.status == "done":
            return cast(T, self.replay(claim))
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            self.store.release(full_key, token)
            raise
        return self.finish(full_key, token, result)

    async def acall(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Like ``call``, awaiting ``fn``."""
        full_key, token, claim = self.begin(args, kwargs)
        if claim.status == "done":
            return cast(T, self.replay(claim))
        try:
            result = await fn(*args, **kwargs)
        except BaseException:
            self.store.release(full_key, token)
            raise
        return self.finish(full_key, token, result)

    def replay(self, claim: Claim) -> Any:
        """The stored result: what the function returned for this key, read by ``loads``."""
        assert claim.result is not None
        return self.loads(claim.result)

    def finish(self, full_key: str, token: str, result: T) -> T:
        try:
            payload = self.dumps(result)
        except (TypeError, ValueError) as exc:
            self.store.release(full_key, token)
            raise ArgumentTypeError(
                f"the result of {self.name!r} could not be stored ({exc}); the call ran but "
                "a repeat will run again; return JSON-serialisable values or pass "
                "dumps=/loads="
            ) from exc
        if not self.store.complete(full_key, token, payload, self.ttl_s):
            _log.warning(
                "idempotency claim on %r expired before %r finished; its result was not "
                "stored (raise claim_ttl_s above the call's longest run)",
                full_key,
                self.name,
            )
        return result


def idempotent(
    store: IdempotencyStore | None = None,
    *,
    key: Callable[..., str] | None = None,
    ttl_s: float | None = DEFAULT_TTL_S,
    claim_ttl_s: float = DEFAULT_CLAIM_TTL_S,
    name: str | None = None,
    dumps: Callable[[Any], str] = json.dumps,
    loads: Callable[[str], Any] = json.loads,
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Run the decorated function once per key; repeats get the stored result.

    Args:
        store: Where keys live (default: a ``MemoryIdempotencyStore`` per function; use
            the Redis or SQL store to share keys between Celery workers).
        key: ``(*args, **kwargs) -> str`` choosing the key (an order id, a request id);
            default: a digest of the JSON arguments.
        ttl_s: How long a result answers repeats (None: until ``forget``).
        claim_ttl_s: How long a running call holds its key if it never finishes; keep
            it above the call's longest run.
        name: The key namespace (default: the function's qualified name).
        dumps, loads: How results are stored (JSON by default).

    Raises:
        IdempotencyInProgressError: The key is being processed by another call.
    """
    chosen_store: IdempotencyStore = MemoryIdempotencyStore() if store is None else store
    result_ttl = check_ttl("ttl_s", ttl_s, allow_none=True)
    claim_ttl = check_ttl("claim_ttl_s", claim_ttl_s, allow_none=False)
    assert claim_ttl is not None

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        guard = _Guard(
            store=chosen_store,
            name=name or fn.__qualname__,
            key=key or default_key,
            ttl_s=result_ttl,
            claim_ttl_s=claim_ttl,
            dumps=dumps,
            loads=loads,
        )
        return wrap_calls(fn, guard.call, guard.acall, idempotency_store=chosen_store)

    return decorate
