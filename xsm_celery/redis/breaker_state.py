"""``FleetBreaker``: one ``CircuitBreaker`` chart whose state every worker of a fleet shares.

The state is the breaker chart's own snapshot, kept in one Redis hash with a revision
number. A change (a counted failure, a probe taken, a trip, a reset) restores the chart on
a ``SimulatedClock`` set to Redis' time, sends it the same events ``CircuitBreaker`` sends,
and writes the new snapshot back only if the revision is still the one it read
(compare-and-set in one script); a writer that lost the race retries on the state that won.
So the guards that decide are the chart's (``shouldTrip``, ``probeAvailable``,
``probesSucceeded``), not a copy of them, and two workers can never both take the last probe
slot: exactly ``half_open_max_calls`` probes run across the fleet. The cooldown is the
chart's ``after`` timer, judged against Redis' clock.

Each trip or reset moves the window token, and an outcome admitted under an older token is
dropped, as in ``CircuitBreaker``. A probe that never reports (its worker was killed) counts
as a failed probe once ``probe_timeout_ms`` has passed, so a lost probe cannot wedge the
circuit half-open.

The closed state costs no Redis round trip per call. Each process caches the state and
re-reads it at most every ``check_interval_ms``; while the cached state is closed with no
failure counted, admitting and succeeding touch nothing but two attributes. Failures are
written at once. Successes are written at once only when they matter (failures are
counted); with a failure-rate window they are batched and flushed with the next re-read.
The price, stated in docs/resilience.md: after a trip elsewhere, a process may admit calls
for up to ``check_interval_ms`` more (their outcomes carry the old token and are dropped),
and the rate window sees a process's successes up to ``check_interval_ms`` late.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xsm_celery.checks import BREAKER_CHECK_INTERVAL_MS, BREAKER_PROBE_TIMEOUT_MS
from xsm_celery.engine import SimulatedClock, SyncInterpreter
from xsm_celery.errors import ArgumentTypeError, CircuitOpenError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns import CircuitBreaker
from xsm_celery.redis.fleet_store import FleetKey, FleetRedis, monotonic_ms

__all__ = ["BREAKER_OPTIONS", "BreakerPass", "FleetBreaker", "check_breaker_options"]

#: The ``xsm_breakers`` options a breaker accepts, with ``CircuitBreaker``'s meaning.
BREAKER_OPTIONS = (
    "failure_threshold",
    "cooldown_ms",
    "half_open_max_calls",
    "success_threshold",
    "failure_rate_threshold",
    "window_size",
    "check_interval_ms",
    "probe_timeout_ms",
)

_CONFIG_KEYS = (
    "failure_threshold",
    "half_open_max_calls",
    "success_threshold",
    "failure_rate_threshold",
    "window_size",
)

#: Compare-and-set attempts before a contended change is given up as "busy".
_MAX_RACES = 32


def _intervals(
    check_interval_ms: object, probe_timeout_ms: object, cooldown_ms: float
) -> tuple[float, float]:
    """The checked ``check_interval_ms`` and ``probe_timeout_ms`` (defaulted from the cooldown).

    The default probe timeout is the cooldown, at least a minute (a probe is one real run)
    and at most the range's hour, so a long cooldown never makes a lost probe wedge the
    circuit half-open for longer.
    """
    interval = BREAKER_CHECK_INTERVAL_MS.check("check_interval_ms", check_interval_ms)
    if probe_timeout_ms is None:
        default = min(max(cooldown_ms, 60_000.0), BREAKER_PROBE_TIMEOUT_MS.high)
        return interval, default
    return interval, BREAKER_PROBE_TIMEOUT_MS.check("probe_timeout_ms", probe_timeout_ms)


def check_breaker_options(name: str, options: Mapping[str, Any]) -> None:
    """Check ``xsm_breakers[name]`` as ``FleetBreaker`` will, without a Redis.

    Raises:
        ConfigurationError: An option is unknown or out of its range (``checks``).
    """
    rest = dict(options)
    interval = rest.pop("check_interval_ms", 1_000.0)
    probe = rest.pop("probe_timeout_ms", None)
    unknown = sorted(set(rest) - set(BREAKER_OPTIONS))
    if unknown:
        raise ArgumentTypeError(
            f"breaker {name!r} got unknown options {unknown}; use {list(BREAKER_OPTIONS)}"
        )
    template = CircuitBreaker(name=name, **rest)
    template.close()
    _intervals(interval, probe, template.cooldown_ms)


@dataclass(frozen=True, slots=True)
class BreakerPass:
    """An admission: the window token it was given under, and whether it is a probe."""

    token: int
    probe: bool


@dataclass
class _Seen:
    """What this process last read from Redis."""

    leaf: str = "closed"
    token: int = 0
    failures: int = 0
    fresh_until: float = 0.0
    open_until: float = 0.0


class FleetBreaker:
    """A circuit breaker whose chart lives in Redis (see the module docstring).

    Args:
        store: The fleet's Redis.
        name: The breaker's name, as in ``breaker="payments"``.
        check_interval_ms: How stale this process's cached closed state may get
            (``checks.BREAKER_CHECK_INTERVAL_MS``: 0 to 60 s).
        probe_timeout_ms: After this long without a report a probe counts as failed
            (``checks.BREAKER_PROBE_TIMEOUT_MS``: 1 s to 1 h; default:
            ``max(cooldown_ms, 60 s)``, at most 1 h).
        **options: ``CircuitBreaker``'s thresholds (``failure_threshold``,
            ``cooldown_ms``, ``half_open_max_calls``, ``success_threshold``,
            ``failure_rate_threshold``, ``window_size``), validated by it.

    Raises:
        ValueError: An option is outside its range in ``xsm_celery.checks`` (the message
            names it and the range).
        TypeError: An option is not one of ``BREAKER_OPTIONS``.
    """

    def __init__(
        self,
        store: FleetRedis,
        name: str,
        *,
        check_interval_ms: float = 1_000.0,
        probe_timeout_ms: float | None = None,
        **options: Any,
    ) -> None:
        unknown = sorted(set(options) - set(BREAKER_OPTIONS))
        if unknown:
            raise ArgumentTypeError(
                f"breaker {name!r} got unknown options {unknown}; use {list(BREAKER_OPTIONS)}"
            )
        template = CircuitBreaker(name=name, **options)
        self.name = name
        self.cooldown_ms = template.cooldown_ms
        self.machine = template.interpreter.machine
        self.config = {k: template.interpreter.context[k] for k in _CONFIG_KEYS}
        template.close()
        self.check_interval_ms, self.probe_timeout_ms = _intervals(
            check_interval_ms, probe_timeout_ms, self.cooldown_ms
        )
        self.store = store
        self.key = FleetKey("breaker", name)
        self._hash = store.key(self.key)
        # Re-entrant: a fact subscriber may read ``state()`` from inside a transition.
        self._lock = threading.RLock()
        self._seen = _Seen()
        self._pending: tuple[int, int] = (0, 0)
        #: The state blob and revision last read or written, and whether the last change
        #: took a probe slot (all guarded by ``_lock``).
        self._blob: dict[str, Any] | None = None
        self._rev = 0
        self._took_probe = False

    def admit(self) -> BreakerPass:
        """Admit one call, or raise ``CircuitOpenError`` with the time left in the cooldown.

        Raises:
            CircuitOpenError: The circuit is open, or half-open with every probe taken.
            StoreUnavailableError: Redis could not be reached.
        """
        seen = self._seen
        now = monotonic_ms()
        if seen.leaf == "closed" and now < seen.fresh_until:
            return BreakerPass(seen.token, False)
        if seen.leaf == "open" and now < seen.open_until and now < seen.fresh_until:
            raise CircuitOpenError(self.name, "open", retry_after_ms=seen.open_until - now)
        with self._lock:
            return self._admit_from_redis()

    def record(self, admitted: BreakerPass, outcome: str) -> None:
        """Report a call's ``outcome``: ``"success"``, ``"failure"`` or ``"ignored"``.

        ``"ignored"`` is an error the breaker does not count; a probe's slot is released.

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        seen = self._seen
        if admitted.token != seen.token and not admitted.probe:
            return
        if outcome == "success":
            if not admitted.probe and seen.leaf == "closed" and seen.failures == 0:
                if self.config["failure_rate_threshold"] is not None:
                    self._batch_success(admitted.token)
                return
            event = "SUCCESS"
        elif outcome == "failure":
            event = "FAILURE"
        elif admitted.probe:
            event = "RELEASE"
        else:
            return
        with self._lock:
            self._change([event], admitted.token)

    def reset(self) -> str:
        """Close the circuit for the whole fleet now; returns the state it left.

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        with self._lock:
            before = self._load_state()[0]
            self._change(["RESET"], None, bump=True)
            return before

    def state(self) -> dict[str, object]:
        """The fleet's view of this breaker as stored (for operators).

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        with self._lock:
            return self._describe(*self._load_state())

    def current_state(self) -> dict[str, object]:
        """Like ``state()``, with what the chart's clock did since the last write applied.

        An open circuit whose cooldown ran out reads ``half_open`` (the next call is a probe)
        and a probe lost past ``probe_timeout_ms`` counts as failed, as the next admission
        would see them; nothing is written, so reading never moves the breaker. Only
        meaningful with the breaker's real options (its cooldown is the chart's timer).

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        with self._lock:
            leaf, ctx, token, now = self._load_state()
            step = self._step([], None, now, False, False)
            if step is None:
                return self._describe(leaf, ctx, token, now)
            stored = self._blob
            self._blob = step[0]
            try:
                snapshot = step[0]["snapshot"]
                return self._describe(
                    str(snapshot["value"]), dict(snapshot["context"]), int(step[0]["token"]), now
                )
            finally:
                self._blob = stored

    def apply(self, event: str | None, generation: int | None) -> dict[str, object]:
        """Send ``event`` (or only apply an elapsed cooldown) to the shared chart, now.

        Unlike ``record`` this always goes to Redis; an outcome whose ``generation`` is
        not the current window token changes nothing. Returns ``state()``'s dict.

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        with self._lock:
            return self._describe(*self._change([event] if event else [], generation))

    def admit_status(self) -> tuple[BreakerPass | None, dict[str, object]]:
        """Like ``admit`` but always asking Redis, and returning the state beside the pass.

        Raises:
            StoreUnavailableError: Redis could not be reached.
        """
        with self._lock:
            leaf, ctx, token, now = self._change(["PROBE"], None, only_if_half_open=True)
            described = self._describe(leaf, ctx, token, now)
            if leaf == "closed":
                return BreakerPass(token, False), described
            if leaf == "half_open" and self._took_probe:
                return BreakerPass(token, True), described
            return None, described

    def _describe(
        self, leaf: str, ctx: dict[str, Any], token: int, now: float
    ) -> dict[str, object]:
        blob = self._blob
        out: dict[str, object] = {
            "state": leaf,
            "failures": int(ctx.get("failures", 0)),
            "opened_count": int(ctx.get("opened_count", 0)),
            "probes_in_flight": int(ctx.get("probes_in_flight", 0)) if leaf == "half_open" else 0,
            "token": token,
        }
        if leaf == "open" and blob is not None:
            left = float(blob.get("opened_at", now)) + self.cooldown_ms - now
            out["retry_after_ms"] = max(1, int(left))
        return out

    def _batch_success(self, token: int) -> None:
        pending_token, count = self._pending
        self._pending = (token, count + 1 if pending_token == token else 1)

    def _admit_from_redis(self) -> BreakerPass:
        self._flush_pending()
        leaf, _ctx, token, now = self._change(["PROBE"], None, only_if_half_open=True)
        if leaf == "closed":
            return BreakerPass(token, False)
        if leaf == "half_open" and self._took_probe:
            return BreakerPass(token, True)
        retry = self._retry_after(leaf, now)
        raise CircuitOpenError(self.name, leaf, retry_after_ms=retry)

    def _retry_after(self, leaf: str, now: float) -> float:
        blob = self._blob or {}
        if leaf == "open":
            return max(1.0, float(blob.get("opened_at", now)) + self.cooldown_ms - now)
        return max(50.0, min(self.cooldown_ms, 1_000.0))

    def _flush_pending(self) -> None:
        token, count = self._pending
        self._pending = (0, 0)
        if count and token == self._seen.token:
            self._change(["SUCCESS"] * count, token)

    def _load_state(self) -> tuple[str, dict[str, Any], int, float]:
        blob, rev, now = self.store.run("BREAKER_LOAD", (self._hash,), ())
        self._remember(blob, int(rev))
        leaf, ctx, token = self._read(self._blob)
        self._note(leaf, ctx, token, float(now))
        return leaf, ctx, token, float(now)

    def _remember(self, blob: Any, rev: int) -> None:
        self._blob = json.loads(blob) if blob else None
        self._rev = rev

    def _read(self, blob: dict[str, Any] | None) -> tuple[str, dict[str, Any], int]:
        if blob is None:
            return "closed", {**self.config, "failures": 0, "window": []}, 0
        leaf = str(blob["snapshot"]["value"])
        return leaf, dict(blob["snapshot"]["context"]), int(blob["token"])

    def _change(
        self,
        events: list[str],
        expect_token: int | None,
        *,
        bump: bool = False,
        only_if_half_open: bool = False,
    ) -> tuple[str, dict[str, Any], int, float]:
        """Apply ``events`` to the shared chart (compare-and-set, retried on a race)."""
        self._took_probe = False
        blob, rev, now = self.store.run("BREAKER_LOAD", (self._hash,), ())
        self._remember(blob, int(rev))
        for _ in range(_MAX_RACES):
            now_f = float(now)
            step = self._step(events, expect_token, now_f, bump, only_if_half_open)
            if step is None:
                leaf, ctx, token = self._read(self._blob)
                self._note(leaf, ctx, token, now_f)
                return leaf, ctx, token, now_f
            new_blob, before, took = step
            leaf = str(new_blob["snapshot"]["value"])
            reply = self.store.run(
                "BREAKER_CAS",
                (self._hash, self.store.index_key(self.key)),
                (
                    self._rev,
                    json.dumps(new_blob, separators=(",", ":")),
                    leaf,
                    new_blob["token"],
                    self.key.member,
                ),
            )
            if int(reply[0]) == 1:
                self._blob, self._rev = new_blob, int(reply[1])
                self._took_probe = took
                ctx = new_blob["snapshot"]["context"]
                self._note(leaf, ctx, int(new_blob["token"]), now_f)
                if leaf != before:
                    emit(
                        FactKind.BREAKER_TRANSITION,
                        breaker=self.name,
                        from_state=before,
                        to_state=leaf,
                        scope="fleet",
                    )
                return leaf, dict(ctx), int(new_blob["token"]), now_f
            self._remember(reply[1], int(reply[2]))
            now = reply[3]
        leaf, ctx, token = self._read(self._blob)
        raise CircuitOpenError(
            self.name, "half_open" if leaf != "open" else leaf, retry_after_ms=50
        )

    def _step(
        self,
        events: list[str],
        expect_token: int | None,
        now: float,
        bump: bool,
        only_if_half_open: bool,
    ) -> tuple[dict[str, Any], str, bool] | None:
        """The new state blob after ``events``, or None when nothing would change."""
        blob = self._blob
        clock = SimulatedClock(wall_start=now / 1000.0, start_ms=0.0)
        if blob is None:
            interp = SyncInterpreter(self.machine, clock=clock).start()
            blob = {"token": 0, "opened_at": now, "probe_at": 0}
        else:
            saved = copy.deepcopy(blob["snapshot"])
            interp = SyncInterpreter.from_snapshot(saved, self.machine, clock=clock)
        interp.context.update(self.config)
        before = _leaf(interp)
        token = int(blob["token"])
        clock.advance_to(0.0)
        ctx = interp.context
        stale_probe = (
            _leaf(interp) == "half_open"
            and ctx["probes_in_flight"] > 0
            and now - float(blob.get("probe_at", 0)) > self.probe_timeout_ms
        )
        if stale_probe:
            interp.send("FAILURE")
        probes = ctx["probes_in_flight"]
        current = token + 1 if _leaf(interp) != before else token
        if expect_token is None or expect_token == current:
            for event in events:
                if event == "PROBE" and (not only_if_half_open or _leaf(interp) == "half_open"):
                    interp.send("PROBE")
                elif event != "PROBE":
                    interp.send(event)
        after = _leaf(interp)
        took = after == "half_open" and interp.context["probes_in_flight"] > probes
        snapshot = interp.snapshot()
        if blob.get("snapshot") is not None and not bump and after == before and not took:
            old = blob["snapshot"]
            if old["context"] == snapshot["context"] and old["value"] == snapshot["value"]:
                return None
        new = {
            "snapshot": snapshot,
            "token": token + 1 if (after != before or bump) else token,
            "opened_at": now if (after == "open" and before != "open") else blob["opened_at"],
            "probe_at": now if took else blob.get("probe_at", 0),
        }
        return new, before, took

    def _note(self, leaf: str, ctx: dict[str, Any], token: int, redis_now: float) -> None:
        local = monotonic_ms()
        open_until = 0.0
        if leaf == "open" and self._blob is not None:
            left = float(self._blob["opened_at"]) + self.cooldown_ms - redis_now
            open_until = local + max(0.0, left)
        self._seen = _Seen(
            leaf=leaf,
            token=token,
            failures=int(ctx.get("failures", 0)),
            fresh_until=local + self.check_interval_ms,
            open_until=open_until,
        )


def _leaf(interp: SyncInterpreter) -> str:
    for state_id in interp.current_state_ids:
        leaf = state_id.rsplit(".", 1)[-1]
        if leaf in ("closed", "open", "half_open"):
            return leaf
    return "closed"
