"""Timeouts and deadlines for calls, sync and async, with the budget passed down.

A timeout says how long one call may take; a deadline says when the whole piece of work
must be done. ``deadline(2.0)`` opens a budget for everything inside it (a context
variable, so it follows threads' and asyncio tasks' own contexts), and every
``call_with_timeout`` / ``acall_with_timeout`` / ``@with_timeout`` inside uses whichever
is sooner: its own timeout or what is left of the deadline. Three nested calls of 1 s
each under a 2 s deadline never take 3 s.

An ``async`` call is cancelled when its time runs out. A synchronous call cannot be
interrupted in Python: it runs on a daemon thread and is abandoned (its result dropped)
when the time is up, and the caller gets ``DeadlineExceededError`` on time. Inside a
Celery task prefer the task's own ``time_limit`` / ``soft_time_limit`` for the task as a
whole, and use these for the individual calls it makes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, NoReturn, ParamSpec, TypeVar

from xsm_celery.checks import POSITIVE_SECONDS
from xsm_celery.errors import ConfigurationError, DeadlineExceededError, UnknownNameError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.wrapping import wrap_calls

__all__ = [
    "Deadline",
    "TimeoutManager",
    "acall_with_timeout",
    "arun_with_timeout",
    "call_with_timeout",
    "current_deadline",
    "deadline",
    "run_with_timeout",
    "with_timeout",
]

P = ParamSpec("P")
T = TypeVar("T")


class Deadline:
    """A point in monotonic time by which work must be done."""

    __slots__ = ("at", "budget_s", "name")

    def __init__(self, seconds: float, *, name: str = "deadline") -> None:
        self.budget_s = POSITIVE_SECONDS.require("seconds", seconds)
        self.at = time.monotonic() + self.budget_s
        self.name = name

    def remaining_s(self) -> float:
        """Seconds left, never below 0."""
        return max(0.0, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return time.monotonic() >= self.at

    def check(self) -> None:
        """Raise ``DeadlineExceededError`` if the deadline has passed; for loops that poll."""
        if self.expired:
            _exceeded(self.name, self.budget_s)

    def __repr__(self) -> str:
        return f"Deadline({self.name!r}, remaining_s={self.remaining_s():.3f})"


_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "xsm_celery_deadline", default=None
)


def current_deadline() -> Deadline | None:
    """The innermost deadline open in this context, if any."""
    return _current.get()


@contextlib.contextmanager
def deadline(seconds: float, *, name: str = "deadline") -> Iterator[Deadline]:
    """Open a deadline for the block; an enclosing, sooner deadline still wins.

    Raises:
        ValueError: ``seconds`` is not finite and positive.
    """
    mine = Deadline(seconds, name=name)
    outer = _current.get()
    effective = outer if outer is not None and outer.at < mine.at else mine
    token = _current.set(effective)
    try:
        yield effective
    finally:
        _current.reset(token)


def _budget(timeout_s: float | None, name: str) -> tuple[float, float]:
    """The seconds this call may take, and the budget to report if it runs out."""
    own = None if timeout_s is None else POSITIVE_SECONDS.require("timeout_s", timeout_s)
    outer = _current.get()
    if outer is None:
        if own is None:
            raise ConfigurationError(
                f"'{name}' has no timeout and no deadline is open; pass timeout_s or call "
                "it inside 'with deadline(seconds):'"
            )
        return own, own
    left = outer.remaining_s()
    if own is not None and own <= left:
        return own, own
    if left <= 0:
        _exceeded(name, outer.budget_s)
    return left, outer.budget_s


def _exceeded(name: str, budget_s: float) -> NoReturn:
    emit(FactKind.DEADLINE_EXCEEDED, call=name)
    raise DeadlineExceededError(name, timeout_s=budget_s)


def call_with_timeout(
    fn: Callable[P, T], timeout_s: float | None, /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """Run ``fn`` on a daemon thread and wait at most ``timeout_s`` (or the open deadline).

    ``timeout_s`` None means "whatever the open deadline leaves". The thread runs in a
    copy of the caller's context, so deadlines opened around this call apply inside it.

    Raises:
        DeadlineExceededError: Time ran out; ``fn`` was abandoned, its result dropped.
        ValueError: Neither a timeout nor an open deadline was given.
    """
    return run_with_timeout(_label(fn), timeout_s, functools.partial(fn, *args, **kwargs))


async def acall_with_timeout(
    fn: Callable[P, Awaitable[T]], timeout_s: float | None, /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """Await ``fn(...)`` for at most ``timeout_s`` (or the open deadline); cancel it after.

    Raises:
        DeadlineExceededError: Time ran out and the call was cancelled.
        ValueError: Neither a timeout nor an open deadline was given.
    """
    return await arun_with_timeout(_label(fn), timeout_s, fn(*args, **kwargs))


def _label(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


def run_with_timeout(label: str, timeout_s: float | None, work: Callable[[], T]) -> T:
    """Run ``work()`` with a timeout, reported as ``label``; the engine of the sync helpers."""
    seconds, budget = _budget(timeout_s, label)
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def bounded() -> T:
        # The same budget inside the thread: if the caller gives up, a retry loop in
        # the abandoned work stops at its next delay instead of running on unseen.
        with deadline(seconds, name=label):
            return work()

    def run() -> None:
        try:
            outcome["value"] = context.run(bounded)
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=run, name=f"xsm-timeout-{label}", daemon=True).start()
    if not finished.wait(seconds):
        _exceeded(label, budget)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


async def arun_with_timeout(label: str, timeout_s: float | None, work: Awaitable[T]) -> T:
    """Await ``work`` with a timeout, reported as ``label``; closed unawaited if refused."""
    try:
        seconds, budget = _budget(timeout_s, label)
    except BaseException:
        if inspect.iscoroutine(work):
            work.close()  # never awaited: close it so Python does not warn
        raise
    try:
        return await asyncio.wait_for(work, seconds)
    except TimeoutError:
        _exceeded(label, budget)


def with_timeout(
    timeout_s: float, *, name: str | None = None
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Decorate a plain or ``async def`` function with a timeout (capped by any deadline)."""
    seconds = POSITIVE_SECONDS.require("timeout_s", timeout_s)

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        label = name or fn.__qualname__

        def run(target: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
            return run_with_timeout(label, seconds, functools.partial(target, *args, **kwargs))

        async def arun(
            target: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
        ) -> T:
            return await arun_with_timeout(label, seconds, target(*args, **kwargs))

        return wrap_calls(fn, run, arun)

    return decorate


class TimeoutManager:
    """Named timeouts in one place: ``TimeoutManager({"db": 2, "http": 5}, default_s=10)``.

    Calls name their kind of work instead of repeating numbers, so an operator tunes one
    mapping (for example loaded from ``app.conf``).

    Raises:
        ValueError: A timeout is not finite and positive.
    """

    def __init__(
        self, timeouts: Mapping[str, float] | None = None, *, default_s: float | None = None
    ) -> None:
        self._timeouts = {
            name: POSITIVE_SECONDS.require(f"timeout '{name}'", value)
            for name, value in (timeouts or {}).items()
        }
        self.default_s = (
            None if default_s is None else POSITIVE_SECONDS.require("default_s", default_s)
        )

    def get(self, name: str) -> float:
        """The timeout for ``name``, or the default.

        Raises:
            KeyError: ``name`` is unknown and there is no default.
        """
        if name in self._timeouts:
            return self._timeouts[name]
        if self.default_s is None:
            known = ", ".join(sorted(self._timeouts)) or "none"
            raise UnknownNameError(f"no timeout named {name!r} (known: {known}) and no default_s")
        return self.default_s

    def set(self, name: str, seconds: float) -> None:
        """Set or change the timeout for ``name``."""
        self._timeouts[name] = POSITIVE_SECONDS.require(f"timeout '{name}'", seconds)

    def call(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``call_with_timeout`` with the timeout named ``name``."""
        return run_with_timeout(name, self.get(name), functools.partial(fn, *args, **kwargs))

    async def acall(
        self, name: str, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``acall_with_timeout`` with the timeout named ``name``."""
        return await arun_with_timeout(name, self.get(name), fn(*args, **kwargs))
