"""``wrap_calls``: the one decorator shape every policy shares, for plain and async functions.

A policy (a breaker, a bulkhead, a retry, a timeout...) knows how to run one call and how
to await one. Which of the two a decorated function needs is decided here, once, when it
is decorated, as tenacity's ``retry()`` does: the function is inspected a single time and
gets a plain or an ``async def`` wrapper, so no call pays for the test and an ``async
def`` function stays a coroutine function for ``inspect`` and for frameworks that check.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

__all__ = ["AsyncRunner", "SyncRunner", "wrap_calls"]

P = ParamSpec("P")
T = TypeVar("T")

#: Runs one call of ``fn`` under a policy: ``run(fn, *args, **kwargs)``, as ``Bulkhead.call``.
SyncRunner = Callable[Concatenate[Callable[P, T], P], T]
#: Awaits one call of a coroutine function under a policy, as ``Bulkhead.acall``.
AsyncRunner = Callable[
    Concatenate[Callable[P, Coroutine[Any, Any, Any]], P], Coroutine[Any, Any, Any]
]


def wrap_calls(
    fn: Callable[P, T],
    run: SyncRunner[P, T],
    arun: AsyncRunner[P],
    /,
    **exposed: object,
) -> Callable[P, T]:
    """Wrap ``fn`` so every call goes through ``run``, or is awaited through ``arun``.

    ``exposed`` become attributes of the wrapper (``fn.breaker``, ``fn.limiter``), so a
    caller can inspect or reset the policy a decorator created for it.
    """
    if inspect.iscoroutinefunction(fn):
        coroutine_fn = fn

        @functools.wraps(fn)
        async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            return await arun(coroutine_fn, *args, **kwargs)

        # For a coroutine function T is the coroutine type, which is what async_wrapper
        # returns; the type checker cannot tie the two together.
        return _expose(cast(Callable[P, T], async_wrapper), exposed)

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return run(fn, *args, **kwargs)

    return _expose(wrapper, exposed)


def _expose(wrapper: Callable[P, T], exposed: dict[str, object]) -> Callable[P, T]:
    for name, value in exposed.items():
        setattr(wrapper, name, value)
    return wrapper
