"""The websocket reconnect recipe (examples/recipes/websocket_reconnect) does what its page says."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from xsm_celery.engine import SimulatedClock, SyncInterpreter

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "recipes" / "websocket_reconnect"


def load_recipe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ws_reconnect", RECIPE / "ws_reconnect.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ws = load_recipe()


@pytest.fixture
def server() -> Any:
    return ws.FakeServer()


def connect(server: Any, seed: int = 7) -> tuple[SyncInterpreter, SimulatedClock]:
    clock = SimulatedClock()
    socket = SyncInterpreter(ws.build_machine(server, ws.default_policy(seed=seed)), clock=clock).start()
    socket.send("CONNECT")
    assert socket.value == "connected"
    return socket, clock


def test_message_then_disconnect_closes_the_socket(server: Any) -> None:
    """A message is received; DISCONNECT leaves connected and the cleanup closes the socket."""
    socket, clock = connect(server)
    client = server.clients[-1]
    client.deliver("hello")
    clock.increment(0)
    assert socket.context["messages"] == ["hello"]
    socket.send("DISCONNECT")
    assert socket.value == "disconnected"
    assert client.closed


def test_drop_reconnects_after_exactly_the_jittered_delay(server: Any) -> None:
    """The machine stays reconnecting until 1 ms before the seeded delay, then reconnects and resets attempt."""
    socket, clock = connect(server, seed=11)
    expected = ws.default_policy(seed=11).delay_ms(1)
    old = server.clients[-1]
    old.drop()
    clock.increment(0)
    assert socket.value == "reconnecting"
    assert old.closed
    assert socket.context["attempt"] == 1
    assert socket.context["attempt_delay_ms"] == expected
    clock.increment(expected - 1)
    assert socket.value == "reconnecting"
    clock.increment(1)
    assert socket.value == "connected"
    assert socket.context["attempt"] == 0
    assert server.connects == 2


def test_gives_up_after_max_attempts_connects(server: Any) -> None:
    """With the server down, the machine ends in failed after exactly MAX_ATTEMPTS connects."""
    clock = SimulatedClock()
    socket = SyncInterpreter(ws.build_machine(server, ws.default_policy(seed=3)), clock=clock).start()
    server.refuse = 99
    socket.send("CONNECT")
    for _ in range(20):
        clock.increment(60_000)
    assert socket.value == "failed"
    assert server.connects == ws.MAX_ATTEMPTS


def test_seed_sized_policy_makes_three_connects_not_four(server: Any) -> None:
    """max_attempts=3 (the seed's numbers): three failed connects, then failed."""
    from xsm_celery.patterns import RetryPolicy

    policy = RetryPolicy(max_attempts=3, base_ms=1000, jitter="full", rng=random.Random(7).random)
    clock = SimulatedClock()
    socket = SyncInterpreter(ws.build_machine(server, policy), clock=clock).start()
    server.refuse = 99
    socket.send("CONNECT")
    for _ in range(3):
        clock.increment(4000)
    assert socket.value == "failed"
    assert server.connects == 3


def test_disconnect_during_backoff_cancels_the_retry(server: Any) -> None:
    """DISCONNECT while reconnecting: the pending retry never fires, no connect happens."""
    socket, clock = connect(server)
    server.clients[-1].drop()
    clock.increment(0)
    socket.send("DISCONNECT")
    connects = server.connects
    clock.increment(600_000)
    assert socket.value == "disconnected"
    assert server.connects == connects


def test_connect_from_failed_starts_over(server: Any) -> None:
    """CONNECT in failed resets the counter and tries again."""
    clock = SimulatedClock()
    socket = SyncInterpreter(ws.build_machine(server, ws.default_policy(seed=1)), clock=clock).start()
    server.refuse = ws.MAX_ATTEMPTS
    socket.send("CONNECT")
    for _ in range(20):
        clock.increment(60_000)
    assert socket.value == "failed"
    socket.send("CONNECT")
    assert socket.value == "connected"
    assert socket.context["attempt"] == 0


def test_demo_runs() -> None:
    """python ws_reconnect.py prints the demo and ends failed."""
    result = subprocess.run(
        [sys.executable, str(RECIPE / "ws_reconnect.py")], check=False, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(RECIPE.parents[2])},
    )
    assert result.returncode == 0, result.stderr
    assert "server down: failed" in result.stdout
