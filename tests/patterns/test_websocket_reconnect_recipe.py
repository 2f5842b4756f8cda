"""The websocket reconnect recipe (examples/recipes/websocket_reconnect) on both engines."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import random
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from xsm_celery.engine import Interpreter, SimulatedClock, SyncInterpreter
from xsm_celery.patterns import RetryPolicy

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "websocket_reconnect"


def load_recipe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ws_reconnect", RECIPE / "ws_reconnect.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ws = load_recipe()


async def settle(value: Any) -> Any:
    """Await what the async engine returns; pass the sync engine's results through."""
    return await value if inspect.isawaitable(value) else value


class Socket:
    """One recipe machine on the chosen engine, with one simulated clock."""

    def __init__(self, engine: type[Any], server: Any, policy: RetryPolicy) -> None:
        self.clock = SimulatedClock()
        self.server = server
        self.interp = engine(ws.build_machine(server, policy), clock=self.clock)

    async def start(self) -> Socket:
        await settle(self.interp.start())
        return self

    async def send(self, event: str) -> None:
        await settle(self.interp.send(event))

    async def advance(self, ms: float) -> None:
        await self.clock.increment(ms)

    @property
    def value(self) -> Any:
        return self.interp.value

    @property
    def context(self) -> dict[str, Any]:
        return self.interp.context  # type: ignore[no-any-return]


Scenario = Callable[[Socket], Awaitable[None]]
ENGINES = [pytest.param(SyncInterpreter, id="sync"), pytest.param(Interpreter, id="async")]


def run(
    engine: type[Any], scenario: Scenario, policy: RetryPolicy | None = None, refuse: int = 0
) -> Any:
    server = ws.FakeServer()
    server.refuse = refuse

    async def main() -> None:
        socket = await Socket(engine, server, policy or ws.default_policy(seed=7)).start()
        await scenario(socket)

    asyncio.run(main())
    return server


@pytest.mark.parametrize("engine", ENGINES)
def test_message_then_disconnect_closes_the_socket(engine: type[Any]) -> None:
    """A message is received; DISCONNECT leaves connected and the cleanup closes the socket."""

    async def scenario(s: Socket) -> None:
        await s.send("CONNECT")
        assert s.value == "connected"
        client = s.server.clients[-1]
        client.deliver("hello")
        await s.advance(0)
        assert s.context["messages"] == ["hello"]
        assert not client.closed
        await s.send("DISCONNECT")
        assert s.value == "disconnected"
        assert client.closed

    run(engine, scenario)


@pytest.mark.parametrize("engine", ENGINES)
def test_drop_reconnects_after_exactly_the_jittered_delay(engine: type[Any]) -> None:
    """Reconnecting until 1 ms before the seeded delay, then connected with attempt reset."""
    expected = ws.default_policy(seed=11).delay_ms(1)

    async def scenario(s: Socket) -> None:
        await s.send("CONNECT")
        old = s.server.clients[-1]
        old.drop()
        await s.advance(0)
        assert s.value == "reconnecting"
        assert old.closed
        assert (s.context["attempt"], s.context["attempt_delay_ms"]) == (1, expected)
        await s.advance(expected - 1)
        assert s.value == "reconnecting"
        await s.advance(1)
        assert s.value == "connected"
        assert s.context["attempt"] == 0

    server = run(engine, scenario, ws.default_policy(seed=11))
    assert server.connects == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_gives_up_after_max_attempts_connects(engine: type[Any]) -> None:
    """With the server down the machine ends in failed after exactly MAX_ATTEMPTS connects."""

    async def scenario(s: Socket) -> None:
        await s.send("CONNECT")
        for _ in range(20):
            await s.advance(60_000)
        assert s.value == "failed"

    assert run(engine, scenario, refuse=99).connects == ws.MAX_ATTEMPTS


@pytest.mark.parametrize("engine", ENGINES)
def test_seed_sized_policy_makes_three_connects_not_four(engine: type[Any]) -> None:
    """max_attempts=3 (the seed's numbers): three failed connects, then failed."""
    policy = RetryPolicy(max_attempts=3, base_ms=1000, jitter="full", rng=random.Random(7).random)

    async def scenario(s: Socket) -> None:
        await s.send("CONNECT")
        for _ in range(3):
            await s.advance(4000)
        assert s.value == "failed"

    assert run(engine, scenario, policy, refuse=99).connects == 3


@pytest.mark.parametrize("engine", ENGINES)
def test_disconnect_during_backoff_cancels_the_retry(engine: type[Any]) -> None:
    """DISCONNECT while reconnecting: the pending retry never fires, no connect happens."""

    async def scenario(s: Socket) -> None:
        await s.send("CONNECT")
        s.server.clients[-1].drop()
        await s.advance(0)
        await s.send("DISCONNECT")
        connects = s.server.connects
        await s.advance(600_000)
        assert s.value == "disconnected"
        assert s.server.connects == connects

    run(engine, scenario)


@pytest.mark.parametrize("engine", ENGINES)
def test_connect_from_failed_starts_over(engine: type[Any]) -> None:
    """CONNECT in failed resets the counter and tries again."""

    async def scenario(s: Socket) -> None:
        await s.send("CONNECT")
        for _ in range(20):
            await s.advance(60_000)
        assert s.value == "failed"
        await s.send("CONNECT")
        assert s.value == "connected"
        assert s.context["attempt"] == 0

    run(engine, scenario, refuse=ws.MAX_ATTEMPTS)


def test_seed_code_runs_against_the_shipped_chart() -> None:
    """The shipped machine.json is the seed's chart plus MESSAGE and a CONNECT out of failed."""
    states = ws.CHART["states"]
    assert set(states) == {"disconnected", "connecting", "connected", "reconnecting", "failed"}
    assert states["reconnecting"]["after"]["retryDelay"][0]["guard"] == "retryCanRetry"
    assert states["failed"]["on"]["CONNECT"]["actions"] == "retryReset"


def test_demo_runs() -> None:
    """python ws_reconnect.py prints the demo and ends failed."""
    result = subprocess.run(
        [sys.executable, str(RECIPE / "ws_reconnect.py")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(RECIPE.parents[2])},
    )
    assert result.returncode == 0, result.stderr
    assert "server down: failed" in result.stdout
