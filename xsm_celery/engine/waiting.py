"""Waiting for a machine: ``wait_for``, ``wait_for_sync`` and ``to_promise`` as functions.

0.11.0 and XState export these as functions of the actor (``waitFor(actor, predicate)``,
``toPromise(actor)``); here the async :class:`~xsm_celery.engine.aio.Interpreter` has them as
methods, and these functions delegate to them, or poll a :class:`SyncInterpreter` (calling
its ``tick()`` so wall-clock timers and posted events are delivered while it waits).
A condition is a predicate of the interpreter, or a state it must be in (``"job.done"``,
``"#done"``). A machine that stops or finishes before the condition holds ends the wait:
the condition can no longer become true.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from xsm_celery.engine.aio import Interpreter
from xsm_celery.engine.runtime import Core
from xsm_celery.engine.state import NOT_STARTED, RUNNING
from xsm_celery.errors import ConfigurationError, WaitTimeoutError

__all__ = ["to_promise", "wait_for", "wait_for_sync"]

Condition = Callable[[Any], bool] | str


def _predicate(condition: Condition) -> Callable[[Any], bool]:
    if isinstance(condition, str):
        state = condition
        return lambda interp: bool(interp.matches(state))
    return condition


def _check(interp: Core, holds: Callable[[Any], bool], deadline: float | None) -> bool:
    """Whether the wait is over; raises when it can no longer succeed or time is up."""
    if holds(interp):
        return True
    if interp.status not in (RUNNING, NOT_STARTED):
        raise WaitTimeoutError(
            f"machine {interp.id!r} is {interp.status} in {sorted(interp.current_state_ids)}; "
            "the condition can no longer become true"
        )
    if deadline is not None and time.monotonic() >= deadline:
        raise WaitTimeoutError(
            f"machine {interp.id!r}: condition not met in time (now in "
            f"{sorted(interp.current_state_ids)})"
        )
    return False


async def wait_for(
    interpreter: Core,
    predicate: Condition,
    *,
    timeout: float | None = 10.0,
    poll_interval: float = 0.005,
) -> Any:
    """Wait, without blocking the loop, until ``predicate`` holds; returns the interpreter.

    Raises:
        WaitTimeoutError: (a ``TimeoutError``) not within ``timeout`` seconds, or the
            machine stopped or finished first.
        StateNotFoundError: ``predicate`` names a state the chart does not have.
    """
    if isinstance(interpreter, Interpreter):
        return await interpreter.wait_for(predicate, timeout=timeout, poll_s=poll_interval)
    holds = _predicate(predicate)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not _check(interpreter, holds, deadline):
        interpreter.tick()
        await asyncio.sleep(poll_interval)
    return interpreter


def wait_for_sync(
    interpreter: Core,
    predicate: Condition,
    *,
    timeout: float | None = 10.0,
    poll_interval: float = 0.005,
) -> Any:
    """Block until ``predicate`` holds; returns the interpreter (0.11.0's ``wait_for_sync``).

    A ``SyncInterpreter`` is ticked while it waits. An async ``Interpreter`` is only watched
    (its own loop, on another thread, moves it on).

    Raises:
        WaitTimeoutError: not within ``timeout`` seconds, or the machine stopped or finished.
        ConfigurationError: called on the thread whose running loop drives the async
            ``Interpreter``, which would block it forever; ``await wait_for(...)`` there.
    """
    if isinstance(interpreter, Interpreter) and _loop_runs_here():
        raise ConfigurationError(
            "wait_for_sync() would block the event loop that drives this Interpreter; use "
            "`await wait_for(interp, ...)` inside the loop"
        )
    holds = _predicate(predicate)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not _check(interpreter, holds, deadline):
        if not isinstance(interpreter, Interpreter):
            interpreter.tick()
        time.sleep(poll_interval)
    return interpreter


async def to_promise(interpreter: Core, *, timeout: float | None = None) -> Any:
    """Wait until the machine is done and return its ``output`` (XState's ``toPromise``).

    Raises:
        WaitTimeoutError: not done within ``timeout`` seconds, or stopped first.
    """
    if isinstance(interpreter, Interpreter):
        return await interpreter.to_promise(timeout=timeout)
    await wait_for(interpreter, lambda interp: interp.status == "done", timeout=timeout)
    return interpreter.output


def _loop_runs_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
