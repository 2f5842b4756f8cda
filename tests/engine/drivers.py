"""Run each engine behaviour test on both interpreters with one spelling: ``Interp(...)``.

A test module that imports :data:`Interp` has every test run twice (see ``conftest.py``):
once on :class:`SyncInterpreter`, once on the asyncio :class:`Interpreter` driven through
:class:`AsyncHandle`, which runs each call to completion on a private event loop so the test
body reads the same for both. What a test sees (state, context, receipts, plugin calls) is
the interpreter's own; only the calling convention is adapted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from xsm_celery import Interpreter, SyncInterpreter

__all__ = ["AsyncHandle", "Interp", "current_driver", "set_driver"]

_state: dict[str, Any] = {"driver": "sync", "loop": None}

#: Loop turns given to tasks (async services, async actions) after each call.
SETTLE_TURNS = 5


def set_driver(name: str, loop: asyncio.AbstractEventLoop | None) -> None:
    """Select the interpreter the next ``Interp(...)`` builds (the conftest fixture does it)."""
    _state["driver"] = name
    _state["loop"] = loop


def current_driver() -> str:
    """``"sync"`` or ``"async"``."""
    return str(_state["driver"])


class AsyncHandle:
    """The async ``Interpreter`` behind a synchronous surface, for shared tests."""

    def __init__(self, interp: Interpreter, loop: asyncio.AbstractEventLoop) -> None:
        self.interp = interp
        self.loop = loop

    def settle(self) -> None:
        """Give the loop a few turns so finished tasks report back."""
        for _ in range(SETTLE_TURNS):
            self.loop.run_until_complete(asyncio.sleep(0))

    def start(self) -> AsyncHandle:
        """``await interp.start()``."""
        self.loop.run_until_complete(self.interp.start())
        self.settle()
        return self

    def send(self, *args: Any, **kwargs: Any) -> Any:
        """``await interp.send(...)``; returns the receipt when ``wait=True``."""
        result = self.loop.run_until_complete(_awaited(self.interp.send(*args, **kwargs)))
        self.settle()
        return result

    def stop(self) -> None:
        """``await interp.stop()``."""
        self.loop.run_until_complete(self.interp.stop())

    def use(self, plugin: Any) -> AsyncHandle:
        """Attach a plugin; returns the handle."""
        self.interp.use(plugin)
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.interp, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("interp", "loop"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.interp, name, value)

    def __repr__(self) -> str:
        return repr(self.interp)

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.interp

    def __hash__(self) -> int:
        return hash(self.interp)


async def _awaited(value: Any) -> Any:
    return await value


class _InterpFactory:
    """``Interp(machine, clock=None)`` and ``Interp.from_snapshot(...)`` on the current driver."""

    @property
    def is_async(self) -> bool:
        """Whether the current test runs on the asyncio interpreter."""
        return current_driver() == "async"

    def __call__(self, machine: Any, clock: Any = None) -> Any:
        if not self.is_async:
            return SyncInterpreter(machine, clock=clock)
        return AsyncHandle(Interpreter(machine, clock=clock), self._loop())

    def from_snapshot(self, *args: Any, **kwargs: Any) -> Any:
        if not self.is_async:
            return SyncInterpreter.from_snapshot(*args, **kwargs)
        loop = self._loop()
        asyncio.set_event_loop(loop)
        handle = AsyncHandle(Interpreter.from_snapshot(*args, **kwargs), loop)
        handle.settle()
        return handle

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = _state["loop"]
        if loop is None:
            raise RuntimeError("the async driver needs the engine_driver fixture's loop")
        return loop  # type: ignore[no-any-return]


#: Build an interpreter of the driver under test: ``Interp(machine, clock=clock).start()``.
Interp = _InterpFactory()
