"""The seams between the in-process limiters and the state they keep: three backend Protocols.

A limiter decides *whether a call may run now*; where its counters live is a backend. The
in-process ``RateLimiter``, ``Bulkhead`` and breaker registry keep them in memory; a Celery
fleet keeps them in Redis so every worker process sees the same numbers. Both sides speak
the Protocols below, so a limiter never knows which backend it has, and one contract test
suite (``tests/patterns/contract_limit_backends.py``) holds every backend to one behaviour.

Rules every backend follows:

* **One decision, atomically.** Each method is a single check-and-update: two processes
  calling ``acquire`` at once can never both take the last token, slot or probe. A Redis
  backend does this in one script (one round trip) and reads time from the server, so the
  clocks of the workers never matter.
* **Never block.** A backend answers at once; waiting is the caller's business (an
  in-process limiter sleeps for ``retry_after_s``, a Celery task is re-published with that
  countdown). So a worker slot is never held inside a backend.
* **An outage is an exception, not an answer.** When the service behind a backend cannot
  be reached the method raises ``xsm_celery.errors.StoreUnavailableError``; it never
  invents an ``Admission``. The caller then applies its stated choice (fail open, or fail
  closed by deferring). Bad arguments raise ``ValueError`` naming the argument.
* **Keys are opaque strings** chosen by the caller (a task name, ``"api:customer-42"``); a
  backend may prefix them but must keep distinct keys independent.
* **Specs travel with each call**, so one backend object (one Redis client) serves every
  limit of an application, and a changed limit takes effect on the next call.

Times are seconds as floats (``retry_after_s``), except the breaker cooldown, which is
``cooldown_ms`` like ``CircuitBreaker`` and the ``xsm_breakers`` setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from xsm_celery.checks import (
    BREAKER_COOLDOWN_MS,
    BREAKER_COUNT,
    BREAKER_FAILURE_RATE,
    SPEC_BURST,
    check_rate,
)
from xsm_celery.errors import ConfigurationError

__all__ = [
    "Admission",
    "BreakerDecision",
    "BreakerSettings",
    "BreakerStateBackend",
    "BreakerStatus",
    "ConcurrencyBackend",
    "OutagePolicy",
    "RateAlgorithm",
    "RateLimitBackend",
    "RateSpec",
]

#: What a limiter does when its backend raises ``StoreUnavailableError``: ``"raise"`` it to
#: the caller, ``"fail_open"`` (admit, with a warning and a ``BACKEND_UNAVAILABLE`` fact) or
#: ``"fail_closed"`` (refuse, as if the limit were reached, so the caller waits or defers).
OutagePolicy = Literal["raise", "fail_open", "fail_closed"]

#: ``"token_bucket"`` (rate with a burst allowance) or ``"sliding_window"`` (at most
#: ``rate`` admissions in any window of ``per_s`` seconds, no burst beyond it).
RateAlgorithm = Literal["token_bucket", "sliding_window"]


class Admission(NamedTuple):
    """The answer to one ``acquire``: run now, or how long to wait before asking again.

    A named tuple rather than a dataclass because one is built per admission, on the
    hottest path of every limiter; build it with keywords all the same.

    ``retry_after_s`` is 0.0 when ``allowed``; when refused it is the backend's best
    estimate (> 0) of when the same request would be admitted: exact for a token bucket
    with no other caller, a lower bound under contention. Callers add their own jitter so
    a fleet does not wake in one instant. ``remaining`` is what is left after this
    decision (tokens, window admissions or free slots), for stats and response headers.
    """

    allowed: bool
    retry_after_s: float = 0.0
    remaining: float = 0.0


@dataclass(frozen=True, slots=True)
class RateSpec:
    """A rate limit: ``rate`` admissions per ``per_s`` seconds, with up to ``burst`` at once.

    For a token bucket the bucket holds ``burst`` tokens (default: ``rate``, so a full
    bucket is one period's worth) and refills continuously at ``rate / per_s`` tokens per
    second. A sliding window admits at most ``rate`` costs in any ``per_s``-second window
    and ignores ``burst``.

    Raises:
        ValueError: A number is outside its range in ``xsm_celery.checks`` (``RATE_PER_S``
            for ``rate / per_s``, ``RATE_PERIOD_S``, ``SPEC_BURST``), or ``algorithm`` is
            unknown.
    """

    rate: float
    per_s: float = 1.0
    burst: float | None = None
    algorithm: RateAlgorithm = "token_bucket"

    def __post_init__(self) -> None:
        rate, per_s = check_rate(self.rate, self.per_s)
        object.__setattr__(self, "rate", rate)
        object.__setattr__(self, "per_s", per_s)
        burst = rate if self.burst is None else SPEC_BURST.check("burst", self.burst)
        object.__setattr__(self, "burst", burst)
        if self.algorithm not in ("token_bucket", "sliding_window"):
            raise ConfigurationError(
                f"algorithm must be 'token_bucket' or 'sliding_window', got {self.algorithm!r}"
            )

    @property
    def capacity(self) -> float:
        """The most one instant can admit: ``burst`` for a bucket, ``rate`` for a window."""
        if self.algorithm == "sliding_window":
            return self.rate
        assert self.burst is not None  # set in __post_init__
        return self.burst

    @property
    def tokens_per_s(self) -> float:
        """The sustained rate, ``rate / per_s`` admissions per second."""
        return self.rate / self.per_s


@runtime_checkable
class RateLimitBackend(Protocol):
    """Where a rate limiter's counters live: memory for one process, Redis for a fleet."""

    def acquire(self, key: str, cost: float, spec: RateSpec) -> Admission:
        """Take ``cost`` from ``key``'s limit if it is available now, all or nothing.

        A refused call takes nothing, so it can be repeated after ``retry_after_s``. A key
        seen for the first time starts full (``spec.capacity`` available). The state of a
        key idle for longer than it needs to refill may be dropped (a Redis TTL), since a
        full key and a missing key mean the same.

        Raises:
            ValueError: ``cost`` is not positive or is larger than ``spec.capacity`` (it
                could never be admitted, so waiting would loop for ever).
            StoreUnavailableError: The backing service cannot be reached.
        """
        ...

    def reset(self, key: str) -> None:
        """Forget ``key``'s state, so its next ``acquire`` sees a full limit (operator use)."""
        ...


@runtime_checkable
class ConcurrencyBackend(Protocol):
    """Where a bulkhead's slots live; a slot is a lease, so a dead holder frees it in time.

    ``holder`` is an id the caller chooses (a task id plus a random suffix) and keeps for
    the duration of the work; it makes every method idempotent for that holder, so a retry
    after a lost reply never takes a second slot.
    """

    def acquire(self, key: str, holder: str, limit: int, lease_s: float) -> Admission:
        """Take one of ``limit`` slots of ``key`` for ``holder``, leased for ``lease_s``.

        Expired leases are reclaimed before counting. A holder that already has a slot is
        admitted again and its lease renewed. ``limit`` is passed on every call because an
        adaptive limit changes; a lowered limit never evicts a holder, it only refuses new
        ones until enough slots are released. ``remaining`` is the number of free slots
        after this decision; a refusal's ``retry_after_s`` is an estimate (> 0) of when a
        slot may free up, at most the time until the earliest lease expires.

        Raises:
            ValueError: ``limit`` < 1 or ``lease_s`` not finite and positive.
            StoreUnavailableError: The backing service cannot be reached.
        """
        ...

    def renew(self, key: str, holder: str, lease_s: float) -> bool:
        """Extend ``holder``'s lease to ``lease_s`` from now; False if it no longer holds one.

        False means the lease expired and the slot may already belong to someone else:
        the caller's work is no longer counted and it should say so (log, fact), not stop.
        """
        ...

    def release(self, key: str, holder: str) -> bool:
        """Give ``holder``'s slot back; True if it held one, False (a no-op) otherwise."""
        ...

    def in_use(self, key: str) -> int:
        """How many slots of ``key`` are held now, after reclaiming expired leases."""
        ...


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """The thresholds of one named breaker, with ``CircuitBreaker``'s meanings and defaults.

    Closed: ``failure_threshold`` consecutive failures open the circuit, and so does a
    failure rate of at least ``failure_rate_threshold`` over the last ``window_size``
    outcomes once that many were seen. Open: calls are refused for ``cooldown_ms``, then
    the circuit is half-open. Half-open: at most ``half_open_max_calls`` probes run at
    once; ``success_threshold`` probe successes (default ``half_open_max_calls``) close it,
    any probe failure opens it again.

    Raises:
        ValueError: A threshold is out of its range in ``xsm_celery.checks``
            (``BREAKER_COUNT``, ``BREAKER_COOLDOWN_MS``, ``BREAKER_FAILURE_RATE``); the
            message names it and the range.
    """

    failure_threshold: int = 5
    cooldown_ms: float = 30_000
    half_open_max_calls: int = 1
    success_threshold: int | None = None
    failure_rate_threshold: float | None = None
    window_size: int = 20

    def __post_init__(self) -> None:
        for name in ("failure_threshold", "half_open_max_calls", "window_size"):
            object.__setattr__(self, name, BREAKER_COUNT.check_int(name, getattr(self, name)))
        BREAKER_COOLDOWN_MS.check("cooldown_ms", self.cooldown_ms)
        if self.success_threshold is None:
            object.__setattr__(self, "success_threshold", self.half_open_max_calls)
        else:
            successes = BREAKER_COUNT.check_int("success_threshold", self.success_threshold)
            object.__setattr__(self, "success_threshold", successes)
        if self.failure_rate_threshold is not None:
            BREAKER_FAILURE_RATE.check("failure_rate_threshold", self.failure_rate_threshold)


@dataclass(frozen=True, slots=True)
class BreakerStatus:
    """What a backend knows about one breaker, read in the same step as the decision.

    ``generation`` increases on every change of state and on every reset; an outcome
    reported under an older generation is stale and is ignored (a slow call admitted while
    closed can neither close a half-open circuit nor re-open it later). ``retry_after_s``
    is the time left in the cooldown while open, else 0.0.
    """

    state: Literal["closed", "open", "half_open"]
    generation: int
    failures: int = 0
    opened_count: int = 0
    retry_after_s: float = 0.0


@dataclass(frozen=True, slots=True)
class BreakerDecision:
    """The answer to ``BreakerStateBackend.admit``: run or not, and as what.

    ``probe`` is True when the call was admitted as one of the half-open probes; it must
    report its outcome with ``probe=True`` (or ``release`` it) so the probe slot frees.
    """

    allowed: bool
    probe: bool
    status: BreakerStatus


@runtime_checkable
class BreakerStateBackend(Protocol):
    """Where named breakers keep their state, with ``CircuitBreaker``'s chart semantics.

    A fleet backend makes "exactly ``half_open_max_calls`` probes" and the cooldown hold
    across processes. Callers keep the closed state cheap: after an ``admit`` that found
    the circuit closed with no failures counted, they may admit further calls locally and
    report only failures (and a success after a failure), under the generation they saw;
    the generation makes any outcome reported late harmless.
    """

    def admit(self, name: str, settings: BreakerSettings) -> BreakerDecision:
        """Decide whether one call may run now, moving open to half-open once cooled down.

        Closed: allowed. Open within the cooldown: refused, ``status.retry_after_s`` > 0.
        Open past the cooldown, or half-open: allowed as a probe while a probe slot is
        free and another success could still be needed to close, refused otherwise. An
        unknown name starts closed.

        Raises:
            StoreUnavailableError: The backing service cannot be reached.
        """
        ...

    def record(
        self,
        name: str,
        settings: BreakerSettings,
        generation: int,
        *,
        failed: bool,
        probe: bool,
    ) -> BreakerStatus:
        """Count one outcome admitted under ``generation``; a stale generation changes nothing.

        Closed: a failure is counted and may trip the circuit open; a success clears the
        consecutive count. Half-open (``probe=True``): a success counts toward
        ``success_threshold`` and frees its slot, a failure opens the circuit again.
        Returns the status after the outcome.

        Raises:
            StoreUnavailableError: The backing service cannot be reached.
        """
        ...

    def release(self, name: str, generation: int) -> None:
        """Free a probe slot whose call ended without a counted outcome (a non-counted error).

        A stale generation, or a breaker that is not half-open, is a no-op.
        """
        ...

    def status(self, name: str, settings: BreakerSettings) -> BreakerStatus:
        """The breaker's current status, applying an elapsed cooldown first."""
        ...

    def reset(self, name: str) -> BreakerStatus:
        """Operator override: close the breaker now and bump its generation."""
        ...
