"""``RetryPolicy``: backoff delays with jitter, and the logic a retry chart runs on.

In a statechart the retry loop is the chart itself (``attempting`` -> ``retrying`` ->
``attempting`` after a delay), so a policy only has to supply the delay function and the
small pieces of logic around it under predictable names. The policy is a frozen value:
the same object can drive many machines, and it is safe to share between threads.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.checks import BACKOFF_CAP_MS, BACKOFF_FACTOR, BACKOFF_MS, positive_int
from xsm_celery.engine import MachineLogic
from xsm_celery.errors import ArgumentTypeError, ConfigurationError
from xsm_celery.patterns.error_chain import ERRORS_CONTEXT_KEY
from xsm_celery.patterns.jitter import Jitter, apply_jitter, check_draw, parse_jitter

__all__ = ["ErrorPredicate", "ExceptionTypes", "ResultPredicate", "RetryPolicy"]

_NONE, _FULL, _EQUAL, _DECORRELATED = range(4)
_MODE_CODES = {
    Jitter.NONE: _NONE,
    Jitter.FULL: _FULL,
    Jitter.EQUAL: _EQUAL,
    Jitter.DECORRELATED: _DECORRELATED,
}
_INF = math.inf
#: Attempts whose capped exponential a policy computes up front (later ones on demand).
_PRECOMPUTED_ATTEMPTS = 64

#: One exception class or a tuple of them, as ``except`` accepts.
ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]

#: A predicate on a failure: ``retry_if`` (worth retrying) and ``abort_if`` (stop now).
ErrorPredicate = Callable[[BaseException], bool]

#: A predicate on a returned value: ``retry_on_result`` (this result means "try again").
ResultPredicate = Callable[[Any], bool]


def _predicate(name: str, value: object) -> Any:
    if value is not None and not callable(value):
        raise ArgumentTypeError(
            f"{name} must be None or a callable returning a bool, got {value!r}"
        )
    return value


def _holds(predicate: Callable[[Any], bool], value: object) -> bool | None:
    """``predicate(value)``, or None when the predicate itself raised (a bug in it)."""
    try:
        return bool(predicate(value))
    except Exception:
        return None


def _exception_types(name: str, value: ExceptionTypes) -> tuple[type[BaseException], ...]:
    """Normalise ``retry_on`` / ``give_up_on`` to a tuple of exception classes."""
    items = value if isinstance(value, tuple) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ArgumentTypeError(f"{name} takes exception classes, got {item!r}")
    return items


@dataclass(frozen=True, init=False)
class RetryPolicy:
    """Exponential backoff with jitter, plus the machine logic that drives a retry chart.

    ``delay_ms(n)`` is the wait after the n-th failed attempt (1-based): the capped
    exponential ``min(max_ms, base_ms * factor ** (n - 1))`` randomised by ``jitter``.
    ``max_attempts`` counts the first attempt, so with 3 the third failure is final.

    ``retry_on`` and ``give_up_on`` decide which failures are worth retrying: an error
    that is an instance of ``give_up_on``, or not of ``retry_on``, dead-letters at once
    (the ``Bump`` action marks it and the ``CanRetry`` guard then says no).

    The decision chain, in order: out of attempts stops; ``abort_if(error)`` true stops;
    an instance of ``give_up_on`` (``abort_on`` is the same list) stops; a returned value
    with ``retry_on_result(value)`` true is retried (in-process calls only, see
    ``call_with_retry``); an instance of ``retry_on`` for which ``retry_if`` (if given)
    holds is retried; anything else stops. A predicate that raises counts as "stop", so
    a bug in it can never loop.

    Args:
        max_attempts: Total attempts including the first, at least 1.
        base_ms: Delay before the first retry, in ms (finite, >= 0).
        factor: Growth per attempt (finite, >= 1).
        max_ms: Cap on any single delay; ``math.inf`` means no cap.
        jitter: ``"none"``, ``"full"``, ``"equal"`` or ``"decorrelated"`` (or a ``Jitter``).
        rng: ``() -> float`` in ``[0, 1]``; inject ``random.Random(seed).random`` in tests.
        retry_on: Exception classes that are retried (default: every ``Exception``).
        give_up_on: Exception classes that are never retried, checked first.
        abort_on: More classes that are never retried (the specification's name; they
            are added to ``give_up_on``).
        abort_if: ``error -> bool``; true means never retry this failure.
        retry_if: ``error -> bool``; a failure of a ``retry_on`` type is retried only
            when it holds (a status code, a message).
        retry_on_result: ``value -> bool``; true means the call "succeeded" with a value
            that must be tried again (a pending status).

    Raises:
        ValueError: An argument is outside its range; the message names it.
    """

    max_attempts: int
    base_ms: float
    factor: float
    max_ms: float
    jitter: Jitter
    rng: Callable[[], float] = field(repr=False, compare=False)
    retry_on: tuple[type[BaseException], ...]
    give_up_on: tuple[type[BaseException], ...]
    abort_if: ErrorPredicate | None = field(repr=False, compare=False)
    retry_if: ErrorPredicate | None = field(repr=False, compare=False)
    retry_on_result: ResultPredicate | None = field(repr=False, compare=False)
    _mode: int = field(init=False, repr=False, compare=False)
    _exps: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        max_attempts: int = 5,
        base_ms: float = 200,
        factor: float = 2.0,
        max_ms: float = 30_000,
        jitter: str | Jitter = "full",
        *,
        rng: Callable[[], float] = random.random,
        retry_on: ExceptionTypes = (Exception,),
        give_up_on: ExceptionTypes = (),
        abort_on: ExceptionTypes = (),
        abort_if: ErrorPredicate | None = None,
        retry_if: ErrorPredicate | None = None,
        retry_on_result: ResultPredicate | None = None,
    ) -> None:
        positive_int("max_attempts", max_attempts)
        if not callable(rng):
            raise ArgumentTypeError(
                f"rng must be a callable returning a float in [0, 1], got {rng!r}"
            )
        values = {
            "max_attempts": max_attempts,
            "base_ms": BACKOFF_MS.require("base_ms", base_ms),
            "factor": BACKOFF_FACTOR.require("factor", factor),
            "max_ms": BACKOFF_CAP_MS.require("max_ms", max_ms),
            "jitter": parse_jitter(jitter),
            "rng": rng,
            "retry_on": _exception_types("retry_on", retry_on),
            "give_up_on": (
                *_exception_types("give_up_on", give_up_on),
                *_exception_types("abort_on", abort_on),
            ),
            "abort_if": _predicate("abort_if", abort_if),
            "retry_if": _predicate("retry_if", retry_if),
            "retry_on_result": _predicate("retry_on_result", retry_on_result),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)
        # The jitter mode as a small int for delay_ms: reading an Enum member costs as much
        # as the whole backoff formula does.
        object.__setattr__(self, "_mode", _MODE_CODES[self.jitter])
        # The capped exponential of the first attempts, computed once: the policy is frozen.
        exps = tuple(self.exponential_ms(n) for n in range(1, _PRECOMPUTED_ATTEMPTS + 1))
        object.__setattr__(self, "_exps", exps)

    @classmethod
    def aggressive(cls, **overrides: Any) -> RetryPolicy:
        """Quick, frequent retries for cheap idempotent calls: 5 attempts from 100 ms x1.5."""
        options: dict[str, Any] = {"max_attempts": 5, "base_ms": 100, "factor": 1.5}
        return cls(**{**options, **overrides})

    @classmethod
    def conservative(cls, **overrides: Any) -> RetryPolicy:
        """Few, spaced retries for expensive or rate-limited calls: 3 attempts from 2 s x2."""
        options: dict[str, Any] = {"max_attempts": 3, "base_ms": 2_000, "factor": 2.0}
        return cls(**{**options, **overrides})

    def exponential_ms(self, attempt: int) -> float:
        """The capped delay after ``attempt`` failed, before jitter.

        A growth too large for a float is the cap, never an ``OverflowError``.
        """
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise ConfigurationError(f"attempt is 1-based, got {attempt!r}")
        if self.base_ms == 0.0:
            return 0.0
        try:
            growth = self.factor ** (attempt - 1)
        except OverflowError:
            return self.max_ms
        return min(self.max_ms, self.base_ms * growth)

    def delay_ms(self, attempt: int, *, previous_ms: float | None = None) -> float:
        """The wait in ms before the next attempt, after attempt number ``attempt`` failed.

        Every chart retry computes one, so the common case (an int attempt, a float draw in
        range) is written out here; anything unusual takes the checked path of
        :meth:`exponential_ms`, ``check_draw`` and ``apply_jitter``, with the same result.

        Args:
            attempt: The 1-based number of the attempt that failed.
            previous_ms: The previous delay, for ``decorrelated`` (``base_ms`` when None).

        Raises:
            ValueError: ``attempt`` < 1, or the rng returned a value outside ``[0, 1]``.
        """
        exps = self._exps
        if type(attempt) is not int or not 0 < attempt <= len(exps):
            return self._checked_delay(attempt, previous_ms)
        exp = exps[attempt - 1]
        mode = self._mode
        if mode == _NONE:
            return exp
        draw = self.rng()
        if type(draw) is not float or not 0.0 <= draw <= 1.0 or exp == _INF:
            return self._checked_delay(attempt, previous_ms, exp, draw)
        if mode == _FULL:
            return draw * exp
        if mode == _EQUAL:
            half = exp / 2.0
            return half + draw * half
        # Decorrelated, as ``jitter.apply_jitter`` computes it, with comparisons for min/max.
        base, cap = self.base_ms, self.max_ms
        if cap <= base:
            return cap
        if type(previous_ms) is float:
            prev = previous_ms
        else:
            prev = base if previous_ms is None else float(previous_ms)
        if not 0.0 <= prev < _INF:
            prev = base
        # Conditional expressions, not max()/min(): a builtin call is half of this branch.
        high = 3.0 * prev
        high = base if high < base else high
        high = cap if high > cap else high
        value = base + draw * (high - base)
        return cap if value > cap else value

    def _checked_delay(
        self,
        attempt: int,
        previous_ms: float | None,
        exp: float | None = None,
        draw: object = None,
    ) -> float:
        """``delay_ms`` with every argument and draw validated (the uncommon inputs)."""
        if exp is None:
            exp = self.exponential_ms(attempt)
            if self.jitter is Jitter.NONE:
                return exp
            draw = self.rng()
        checked = check_draw(draw)  # type: ignore[arg-type]
        previous = self.base_ms if previous_ms is None else float(previous_ms)
        return apply_jitter(
            self.jitter,
            exp,
            checked,
            base_ms=self.base_ms,
            cap_ms=self.max_ms,
            previous_ms=previous,
        )

    def should_retry(self, error: object) -> bool:
        """Whether a failure with ``error`` is worth another attempt, by its type alone.

        Something that is not an exception (an error payload from a callback actor) is
        retried: its type says nothing, so the attempt counter decides.
        """
        if not isinstance(error, BaseException):
            return True
        if self.abort_if is not None and _holds(self.abort_if, error) is not False:
            return False
        if isinstance(error, self.give_up_on) or not isinstance(error, self.retry_on):
            return False
        return self.retry_if is None or _holds(self.retry_if, error) is True

    def should_retry_result(self, value: object) -> bool:
        """Whether a returned ``value`` means "try again" (never without ``retry_on_result``)."""
        return self.retry_on_result is not None and _holds(self.retry_on_result, value) is True

    def logic(self, prefix: str = "retry", attempt_key: str = "attempt") -> MachineLogic:
        """The named logic a retry chart uses, for ``MachineLogic.merge()``.

        With the default prefix: the delay ``retryDelay``, the guards ``retryCanRetry``
        (another attempt is allowed), ``retryShouldRetry`` / ``retryGiveUp`` (the error in
        ``event.data`` is / is not retryable by type, for ``onError`` branches) and the
        actions ``retryBump`` (count a failure) and ``retryReset`` (success: start over).
        Everything reads ``context[attempt_key]``, so two loops can share one machine.
        """
        keys = _Keys(attempt_key)
        return MachineLogic(
            actions={
                f"{prefix}Bump": self._bump_action(keys),
                f"{prefix}Reset": _reset_action(keys),
            },
            guards={
                f"{prefix}CanRetry": self._can_retry_guard(keys),
                f"{prefix}ShouldRetry": self._should_retry_guard(),
                f"{prefix}GiveUp": self._give_up_guard(),
            },
            delays={f"{prefix}Delay": self._delay(keys)},
        )

    def context_keys(self, attempt_key: str = "attempt") -> tuple[str, str, str]:
        """The context keys :meth:`logic` reads and writes for ``attempt_key``.

        The counter, the previous delay and the private give-up mark: what a chart task may
        carry between runs on behalf of its policy (see ``xsm_celery.celery.task.header``).
        """
        keys = _Keys(attempt_key)
        return (keys.attempt, keys.delay, keys.give_up)

    def _delay(self, keys: _Keys) -> Callable[[dict[str, Any], Any], float]:
        def delay(ctx: dict[str, Any], event: Any) -> float:
            if ctx.get(keys.give_up):
                return 0.0
            attempt = max(1, _count(ctx, keys.attempt, default=1))
            previous = ctx.get(keys.delay)
            if isinstance(previous, bool) or not isinstance(previous, int | float):
                previous = None
            ms = self.delay_ms(attempt, previous_ms=previous)
            ctx[keys.delay] = ms
            return ms

        return delay

    def _can_retry_guard(self, keys: _Keys) -> Callable[[dict[str, Any], Any], bool]:
        def can_retry(ctx: dict[str, Any], event: Any) -> bool:
            return not ctx.get(keys.give_up) and _count(ctx, keys.attempt) < self.max_attempts

        return can_retry

    def _should_retry_guard(self) -> Callable[[dict[str, Any], Any], bool]:
        def should_retry(ctx: dict[str, Any], event: Any) -> bool:
            return self.should_retry(getattr(event, "data", None))

        return should_retry

    def _give_up_guard(self) -> Callable[[dict[str, Any], Any], bool]:
        def give_up(ctx: dict[str, Any], event: Any) -> bool:
            return not self.should_retry(getattr(event, "data", None))

        return give_up

    def _bump_action(self, keys: _Keys) -> Callable[[Any, dict[str, Any], Any, Any], None]:
        def bump(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
            ctx[keys.attempt] = _count(ctx, keys.attempt) + 1
            error = getattr(event, "data", None)
            if not self.should_retry(error):
                ctx[keys.give_up] = type(error).__name__

        return bump


@dataclass(frozen=True)
class _Keys:
    """The context keys one retry loop uses, derived from its attempt key."""

    attempt: str

    @property
    def delay(self) -> str:
        """Where the previous delay is remembered (``attempt_delay_ms`` by default)."""
        return f"{self.attempt}_delay_ms"

    @property
    def give_up(self) -> str:
        """Set by the bump action when the failure is not retryable; private to the library."""
        return f"_xsm_{self.attempt}_give_up"


def _count(ctx: Mapping[str, Any], key: str, default: int = 0) -> int:
    """The attempt counter in ``ctx``; a missing or unreadable value is ``default``."""
    value = ctx.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


def _reset_action(keys: _Keys) -> Callable[[Any, dict[str, Any], Any, Any], None]:
    """Success: zero the counter, forget the delay and end the dead-letter error chain."""

    def reset(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        ctx[keys.attempt] = 0
        ctx.pop(keys.delay, None)
        ctx.pop(keys.give_up, None)
        ctx.pop(ERRORS_CONTEXT_KEY, None)

    return reset
