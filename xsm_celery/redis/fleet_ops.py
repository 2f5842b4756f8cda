"""What operators do with the fleet state: list every breaker, limiter and slot pool; reset one.

The CLI (``xsm-celery breakers``, ``celery -A proj xsm breakers``) and the Django admin page
both call these two functions, so they always show the same rows. Listing reads the raw
Redis state through the fleet index, so it needs no task definitions: a per-customer
limiter nobody declared by name still shows up. A breaker's thresholds come from
``xsm_breakers`` when given (needed to apply an elapsed cooldown); without them the stored
state is shown as it is.

A reset is audited by the caller in the dead-letter store's audit trail, where operators
already read who replayed or purged what (``audit_reset``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.errors import ConfigurationError
from xsm_celery.redis.breaker_state import FleetBreaker
from xsm_celery.redis.fleet_store import FleetKey, FleetRedis
from xsm_celery.redis.rate_limit import level_at

__all__ = ["AUDIT_ACTION", "FleetRow", "audit_reset", "find_key", "list_fleet", "reset_fleet"]

#: The audit action of a fleet reset.
AUDIT_ACTION = "fleet_reset"

_COMPANIONS = {"rate": (), "window": (":tail",), "slots": (":meta",), "breaker": ()}


@dataclass(frozen=True)
class FleetRow:
    """One breaker, limiter or slot pool as an operator sees it."""

    kind: str
    name: str
    #: A one-word summary: ``closed``/``open``/``half_open``, ``limited``, ``full``, ``ok``.
    state: str
    #: The numbers behind it (tokens, slots held, failures, time left in the cooldown).
    detail: dict[str, object] = field(default_factory=dict)
    #: When the key was last used (epoch seconds, Redis time).
    last_used: float = 0.0

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "kind": self.kind,
            "name": self.name,
            "state": self.state,
            "detail": self.detail,
            "last_used": self.last_used,
        }


def list_fleet(
    store: FleetRedis, breakers: Mapping[str, Mapping[str, Any]] | None = None
) -> list[FleetRow]:
    """Every fleet key in the index, with its state, sorted by kind and name.

    Raises:
        StoreUnavailableError: Redis could not be reached.
    """
    configured = dict(breakers or {})
    rows = []
    seen = set()
    for key, last_used in store.indexed():
        seen.add((key.kind, key.name))
        rows.append(_row(store, key, last_used, configured))
    for name in configured:
        if ("breaker", name) not in seen:
            rows.append(FleetRow("breaker", name, "closed", {"failures": 0, "never_used": True}))
    return sorted(rows, key=lambda r: (r.kind, r.name))


def _row(
    store: FleetRedis, key: FleetKey, last_used: float, breakers: dict[str, Mapping[str, Any]]
) -> FleetRow:
    client = store.client
    redis_key = store.key(key)
    if key.kind == "breaker":
        configured = key.name in breakers
        options = _breaker_options(breakers.get(key.name, {}))
        breaker = FleetBreaker(store, key.name, check_interval_ms=0, **options)
        # The cooldown is the configured breaker's timer: without it the stored state is shown.
        status = breaker.current_state() if configured else breaker.state()
        return FleetRow(key.kind, key.name, str(status.pop("state")), status, last_used)
    if key.kind == "rate":
        return _rate_row(store, key, last_used)
    if key.kind == "window":
        used = int(store.call(lambda: client.zcard(redis_key)))
        return FleetRow(key.kind, key.name, "ok", {"used": used}, last_used)

    def read() -> tuple[int, dict[bytes, bytes]]:
        now_s, now_us = client.time()
        now = now_s * 1000 + now_us // 1000
        return int(client.zcount(redis_key, now, "+inf")), client.hgetall(store.key(key, ":meta"))

    held, meta = store.call(read)
    limit = int(meta[b"limit"]) if b"limit" in meta else None
    detail: dict[str, object] = {"held": held}
    if limit is not None:
        detail["adaptive_limit"] = limit
    if b"hold_ms" in meta:
        detail["avg_hold_ms"] = round(float(meta[b"hold_ms"]), 1)
    state = "full" if limit is not None and held >= limit else "ok"
    return FleetRow(key.kind, key.name, state, detail, last_used)


def _rate_row(store: FleetRedis, key: FleetKey, last_used: float) -> FleetRow:
    """A token bucket refilled to Redis' clock at read time (``rate_limit.level_at``).

    A bucket written before the script stamped its rate shows its stored level, floored at 0.
    """
    client = store.client

    def read() -> tuple[Any, dict[bytes, bytes]]:
        return client.time(), client.hgetall(store.key(key))

    (now_s, now_us), raw = store.call(read)
    now_ms = int(now_s) * 1000 + int(now_us) // 1000
    stored = float(raw.get(b"tokens", b"0") or 0)
    rate = float(raw[b"rate"]) if b"rate" in raw else 0.0
    burst = float(raw[b"burst"]) if b"burst" in raw else max(stored, 0.0)
    tokens, reserved = level_at(stored, float(raw.get(b"ts", now_ms)), now_ms, rate, burst)
    detail: dict[str, object] = {"tokens": round(tokens, 2), "reserved": round(reserved, 2)}
    if b"burst" in raw:
        detail["burst"] = burst
    return FleetRow(key.kind, key.name, "limited" if tokens < 1 else "ok", detail, last_used)


def _breaker_options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k != "on_redis_down"}


def find_key(store: FleetRedis, name: str) -> FleetKey:
    """The fleet key ``name`` means: ``kind:name`` exactly, or a unique bare name.

    Raises:
        ConfigurationError: No key, or several kinds, have that name; the message lists them.
        StoreUnavailableError: Redis could not be reached.
    """
    keys = [k for k, _ in store.indexed()]
    kind, _, rest = name.partition(":")
    if rest and kind in _COMPANIONS:
        exact = [k for k in keys if k.kind == kind and k.name == rest]
        if exact:
            return exact[0]
    matches = [k for k in keys if k.name == name]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = ", ".join(f"{k.kind}:{k.name}" for k in keys[:20]) or "none"
        raise ConfigurationError(
            f"no fleet breaker, limiter or slot pool named {name!r}; known: {known}"
        )
    choices = ", ".join(f"{k.kind}:{k.name}" for k in matches)
    raise ConfigurationError(f"{name!r} names several fleet keys ({choices}); give one of them")


def reset_fleet(
    store: FleetRedis, key: FleetKey, breakers: Mapping[str, Mapping[str, Any]] | None = None
) -> str:
    """Reset one key for the whole fleet; returns what it was (a breaker's state, or "cleared").

    A breaker is closed through its chart (``RESET``, which moves the window token so late
    outcomes are dropped); a limiter or slot pool has its state deleted, so it starts full
    (a task that still runs in a deleted slot finishes; its release is a no-op).

    Raises:
        StoreUnavailableError: Redis could not be reached.
    """
    if key.kind == "breaker":
        options = _breaker_options((breakers or {}).get(key.name, {}))
        before = FleetBreaker(store, key.name, check_interval_ms=0, **options).reset()
        return f"{before} -> closed"
    store.forget(key, *_COMPANIONS[key.kind])
    return "cleared"


def audit_reset(dead_letters: Any, key: FleetKey, *, actor: str, reason: str, outcome: str) -> None:
    """Write the reset to the dead-letter store's audit trail (``record_id`` names the key)."""
    record_id = f"fleet:{key.kind}:{key.name}"[:64]
    dead_letters.audit(
        record_id,
        AUDIT_ACTION,
        actor=actor,
        reason=reason,
        outcome=json.dumps({"outcome": outcome, "key": f"{key.kind}:{key.name}"})[:2000],
    )
