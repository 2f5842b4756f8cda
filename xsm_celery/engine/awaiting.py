"""One home for driving awaitables from code that may or may not run inside an event loop.

Adapters, sinks and services may be blocking or ``async``; the package drives both kinds
through the same code. Three small needs recur: await a value only if it is awaitable, wrap an
arbitrary awaitable in a coroutine (``asyncio.run`` and ``create_task`` take nothing else), and
finish an awaitable that blocking code was handed: run it to completion when no loop runs on
this thread, or schedule it on the running loop, keep it referenced until it ends, and log its
failure, since nobody is left to await it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["await_value", "finish", "maybe_await"]

logger = logging.getLogger("xsm_celery")

T = TypeVar("T")

#: Tasks scheduled by :func:`finish`; held here so the loop's weak references keep them alive.
_background: set[asyncio.Task[Any]] = set()


async def await_value(awaitable: Awaitable[T]) -> T:
    """``await awaitable``, as a coroutine (a Future or a custom awaitable becomes one)."""
    return await awaitable


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable, so one code path drives both adapter kinds."""
    if inspect.isawaitable(value):
        return await value
    return value


def finish(value: Any, what: str) -> None:
    """Finish ``value`` if it is awaitable: run it here, or schedule it on the running loop.

    Without a running loop on this thread it runs to completion now and its error
    propagates. With one, it becomes a task of that loop; an error is logged as
    ``"<what> failed"`` because no caller awaits it.
    """
    if not inspect.isawaitable(value):
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(await_value(value))
        return
    task = loop.create_task(await_value(value))
    _background.add(task)

    def done(finished: asyncio.Task[Any]) -> None:
        _background.discard(finished)
        if not finished.cancelled() and finished.exception() is not None:
            logger.error("%s failed", what, exc_info=finished.exception())

    task.add_done_callback(done)
