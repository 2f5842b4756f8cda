"""``Fallback``: what to do when a call fails, as an ordered list of strategies.

``Fallback().retry_fallback(2).alternative(read_replica).degrade([])`` means: on a
failure, try the call twice more, then the replica with the same arguments, then return
an empty list. Each strategy runs only if everything before it failed with one of the
``on`` exceptions; any other exception propagates at once, untouched, so a bug is never
papered over with a default. A ``Fallback`` is immutable: each builder method returns a
new one, so a shared base can be extended per call site.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

from xsm_celery.checks import PAUSE_SECONDS, positive_int
from xsm_celery.errors import ArgumentTypeError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.retry import ExceptionTypes
from xsm_celery.patterns.wrapping import wrap_calls

__all__ = ["Fallback"]

P = ParamSpec("P")
T = TypeVar("T")

_NO_VALUE: Any = object()


@dataclass(frozen=True, slots=True)
class _Strategy:
    kind: str  # "retry", "alternative" or "degrade"
    attempts: int = 0
    delay_s: float = 0.0
    target: Callable[..., Any] | None = None
    value: Any = _NO_VALUE


def _exception_types(value: ExceptionTypes) -> tuple[type[BaseException], ...]:
    items = value if isinstance(value, tuple) else (value,)
    if not items or not all(isinstance(i, type) and issubclass(i, BaseException) for i in items):
        raise ArgumentTypeError(f"on= takes exception classes, got {value!r}")
    return items


class Fallback(Generic[T]):
    """Ordered recovery strategies for a failing call.

    Args:
        on: The failures that trigger the strategies (default: every ``Exception``).
        name: Shown in facts (default ``"fallback"``).

    Raises:
        TypeError: ``on`` holds something that is not an exception class.
    """

    def __init__(
        self,
        *,
        on: ExceptionTypes = (Exception,),
        name: str = "fallback",
        _strategies: tuple[_Strategy, ...] = (),
    ) -> None:
        self.on = _exception_types(on)
        self.name = name
        self._strategies = _strategies

    def retry_fallback(self, attempts: int = 1, *, delay_s: float = 0.0) -> Fallback[T]:
        """Call the primary again up to ``attempts`` times, ``delay_s`` apart.

        For a quick second chance; use ``RetryPolicy`` for backoff with jitter.
        """
        positive_int("attempts", attempts)
        pause_s = PAUSE_SECONDS.require("delay_s", delay_s)
        return self._then(_Strategy("retry", attempts=attempts, delay_s=pause_s))

    def alternative(self, fn: Callable[..., T | Awaitable[T]]) -> Fallback[T]:
        """Call ``fn`` with the same arguments instead (a replica, a cache, another vendor)."""
        if not callable(fn):
            raise ArgumentTypeError(f"alternative() takes a callable, got {fn!r}")
        return self._then(_Strategy("alternative", target=fn))

    def degrade(
        self, value: T = _NO_VALUE, *, factory: Callable[[BaseException], T] | None = None
    ) -> Fallback[T]:
        """Return ``value`` (or ``factory(error)``) instead of failing: a degraded answer."""
        if (value is _NO_VALUE) == (factory is None):
            raise ArgumentTypeError(
                "degrade() takes either a value or factory=, exactly one of them"
            )
        return self._then(_Strategy("degrade", target=factory, value=value))

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn``; on a failure in ``on``, run the strategies in order until one works.

        Raises:
            BaseException: The last strategy's failure (its ``__context__`` chain holds the
                earlier ones), or any failure not in ``on``.
        """
        try:
            return fn(*args, **kwargs)
        except self.on as exc:
            error: BaseException = exc
        for strategy in self._strategies:
            self._report(strategy, error)
            try:
                return self._run_sync(strategy, error, fn, args, kwargs)
            except self.on as exc:
                error = _chained(exc, error)
        raise error

    async def acall(
        self, fn: Callable[P, Awaitable[T] | T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Like ``call``, awaiting the primary and the strategies when they are awaitable."""
        try:
            return await _maybe_await(fn(*args, **kwargs))
        except self.on as exc:
            error: BaseException = exc
        for strategy in self._strategies:
            self._report(strategy, error)
            try:
                return await self._run_async(strategy, error, fn, args, kwargs)
            except self.on as exc:
                error = _chained(exc, error)
        raise error

    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]:
        """Use the fallback as a decorator on a plain or ``async def`` function."""
        return wrap_calls(fn, self.call, self.acall)

    def _then(self, strategy: _Strategy) -> Fallback[T]:
        return Fallback(on=self.on, name=self.name, _strategies=(*self._strategies, strategy))

    def _report(self, strategy: _Strategy, error: BaseException) -> None:
        emit(
            FactKind.FALLBACK_USED,
            fallback=self.name,
            strategy=strategy.kind,
            error_type=type(error).__name__,
        )

    def _run_sync(
        self,
        strategy: _Strategy,
        error: BaseException,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> T:
        if strategy.kind == "degrade":
            return strategy.value if strategy.target is None else strategy.target(error)  # type: ignore[no-any-return]
        if strategy.kind == "alternative":
            assert strategy.target is not None
            return strategy.target(*args, **kwargs)  # type: ignore[no-any-return]
        for _ in range(strategy.attempts - 1):
            time.sleep(strategy.delay_s)
            try:
                return fn(*args, **kwargs)  # type: ignore[no-any-return]
            except self.on:
                pass
        time.sleep(strategy.delay_s)
        return fn(*args, **kwargs)  # type: ignore[no-any-return]

    async def _run_async(
        self,
        strategy: _Strategy,
        error: BaseException,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> T:
        if strategy.kind == "degrade":
            if strategy.target is None:
                return strategy.value  # type: ignore[no-any-return]
            return await _maybe_await(strategy.target(error))
        if strategy.kind == "alternative":
            assert strategy.target is not None
            return await _maybe_await(strategy.target(*args, **kwargs))
        for _ in range(strategy.attempts - 1):
            await asyncio.sleep(strategy.delay_s)
            try:
                return await _maybe_await(fn(*args, **kwargs))
            except self.on:
                pass
        await asyncio.sleep(strategy.delay_s)
        return await _maybe_await(fn(*args, **kwargs))


def _chained(error: BaseException, earlier: BaseException) -> BaseException:
    """``error`` with ``earlier`` as its context, as if raised while handling it."""
    if error.__context__ is None and error is not earlier:
        error.__context__ = earlier
    return error


async def _maybe_await(value: Awaitable[T] | T) -> T:
    if inspect.isawaitable(value):
        return await value
    return value
