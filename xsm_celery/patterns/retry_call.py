"""Run a call in-process under a ``RetryPolicy``: ``call_with_retry``, ``@retry`` and async.

A Celery task retries through its chart (a countdown per attempt, nothing held while
waiting). Inside one attempt, or outside Celery, a call to a flaky dependency is retried
here instead: the same policy, its delays slept in place. The decision chain is the
policy's: out of attempts stops with ``RetryExhaustedError``; ``abort_if`` and
``give_up_on`` / ``abort_on`` re-raise the failure at once; ``retry_on_result`` retries a
returned value; ``retry_on`` with ``retry_if`` retries a failure; anything else returns
or raises as it is. A delay that would end after the open ``deadline`` stops the loop
early with ``DeadlineExceededError`` (the last failure as its cause): waiting could not
finish in time anyway.

``BaseException`` subclasses that are not ``Exception`` (cancellation, exit) are never
retried.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, ParamSpec, TypeVar

from xsm_celery.errors import ArgumentTypeError, DeadlineExceededError, RetryExhaustedError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.retry import RetryPolicy
from xsm_celery.patterns.timeout import current_deadline
from xsm_celery.patterns.wrapping import wrap_calls

__all__ = ["acall_with_retry", "arun_with_retry", "call_with_retry", "retry", "run_with_retry"]

P = ParamSpec("P")
T = TypeVar("T")


class _Loop:
    """The bookkeeping of one retry loop, shared by the sync and async drivers."""

    def __init__(self, policy: RetryPolicy, name: str) -> None:
        self.policy = policy
        self.name = name
        self.previous_ms: float | None = None

    def after_error(self, attempt: int, error: Exception) -> float:
        """The delay before the next attempt; raises when this failure ends the loop."""
        if not self.policy.should_retry(error):
            raise error
        return self._next(attempt, type(error).__name__, error, "exhausted")

    def after_result(self, attempt: int, value: object) -> float | None:
        """None to return ``value``; else the delay before the next attempt."""
        if not self.policy.should_retry_result(value):
            return None
        return self._next(attempt, "result", None, "result")

    def _next(self, attempt: int, outcome: str, error: Exception | None, reason: str) -> float:
        if attempt >= self.policy.max_attempts:
            self._give_up(attempt, reason, error)
        delay_ms = self.policy.delay_ms(attempt, previous_ms=self.previous_ms)
        self.previous_ms = delay_ms
        budget = current_deadline()
        if budget is not None and delay_ms / 1000.0 >= budget.remaining_s():
            emit(FactKind.RETRY_EXHAUSTED, call=self.name, attempts=attempt, reason="deadline")
            emit(FactKind.DEADLINE_EXCEEDED, call=self.name)
            raise DeadlineExceededError(budget.name, timeout_s=budget.budget_s) from error
        emit(FactKind.RETRY_ATTEMPTED, call=self.name, attempt=attempt, outcome=outcome)
        return delay_ms / 1000.0

    def _give_up(self, attempt: int, reason: str, error: Exception | None) -> NoReturn:
        emit(FactKind.RETRY_EXHAUSTED, call=self.name, attempts=attempt, reason=reason)
        raise RetryExhaustedError(
            self.name, attempts=attempt, reason=reason, last_error=error
        ) from error


def _label(fn: object) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


def call_with_retry(
    policy: RetryPolicy, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """Call ``fn`` until it succeeds or ``policy`` says stop, sleeping its delays.

    Raises:
        RetryExhaustedError: Out of attempts; the last failure is its cause.
        DeadlineExceededError: The next delay would end after the open deadline.
        Exception: A failure the policy does not retry, unchanged.
    """
    return run_with_retry(policy, _label(fn), functools.partial(fn, *args, **kwargs))


async def acall_with_retry(
    policy: RetryPolicy, fn: Callable[P, Awaitable[T] | T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """Like ``call_with_retry``, awaiting ``fn`` and sleeping with ``asyncio.sleep``."""
    return await arun_with_retry(policy, _label(fn), functools.partial(fn, *args, **kwargs))


def run_with_retry(policy: RetryPolicy, label: str, work: Callable[[], T]) -> T:
    """The loop of ``call_with_retry``, reporting facts and errors under ``label``."""
    loop = _Loop(policy, label)
    for attempt in itertools.count(1):  # ends: _Loop raises once max_attempts is reached
        try:
            value = work()
        except Exception as exc:
            delay_s = loop.after_error(attempt, exc)
        else:
            wait = loop.after_result(attempt, value)
            if wait is None:
                return value
            delay_s = wait
        time.sleep(delay_s)
    raise AssertionError("itertools.count never ends")


async def arun_with_retry(
    policy: RetryPolicy, label: str, work: Callable[[], Awaitable[T] | T]
) -> T:
    """The loop of ``acall_with_retry``, reporting facts and errors under ``label``."""
    loop = _Loop(policy, label)
    for attempt in itertools.count(1):  # ends: _Loop raises once max_attempts is reached
        try:
            value = work()
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            delay_s = loop.after_error(attempt, exc)
        else:
            wait = loop.after_result(attempt, value)
            if wait is None:
                return value
            delay_s = wait
        await asyncio.sleep(delay_s)
    raise AssertionError("itertools.count never ends")


def retry(
    policy: RetryPolicy | None = None, **options: Any
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Retry a plain or ``async def`` function in-process: ``@retry(RetryPolicy.aggressive())``.

    Without a policy, ``options`` build one (``@retry(max_attempts=3, base_ms=50)``).
    """
    if policy is not None and options:
        raise ArgumentTypeError("retry() takes a RetryPolicy or its options, not both")
    chosen = policy if policy is not None else RetryPolicy(**options)

    def run(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return call_with_retry(chosen, fn, *args, **kwargs)

    async def arun(fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await acall_with_retry(chosen, fn, *args, **kwargs)

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        return wrap_calls(fn, run, arun)

    return decorate
