"""WebSocket reconnect as a chart: RetryPolicy backoff and the socket as a callback actor.

``machine.json`` is the chart (open it in Stately, or ``xsm-celery inspect`` it); this
module supplies its logic. ``openSocket`` connects (an exception means the connect failed);
``listen`` is a ``from_callback`` actor that exists exactly while ``connected`` is active,
turns the client's messages and its close into events, and returns ``client.close`` as its
cleanup, so the socket is closed whenever the state is left, for whatever reason.

The client here is a fake with the shape of a real adapter over ``websockets`` or
``aiohttp``: ``connect()``, ``close()``, and an ``on_message`` / ``on_close`` pair of
callbacks the listener wires to ``send_back``. Run ``python ws_reconnect.py`` for a demo
on a simulated clock.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xsm_celery import MachineLogic, SimulatedClock, SyncInterpreter, create_machine, from_callback
from xsm_celery.patterns import RetryPolicy

#: The chart, as shipped next to this module.
CHART: dict[str, Any] = json.loads((Path(__file__).with_name("machine.json")).read_text())

#: Connect attempts in a row before the machine gives up in ``failed``.
MAX_ATTEMPTS = 5


class FakeServer:
    """The far end: refuses the next ``refuse`` connects and counts every attempt."""

    def __init__(self) -> None:
        self.refuse = 0
        self.connects = 0
        self.clients: list[FakeClient] = []

    def client(self) -> FakeClient:
        """A new client for this server (what ``websockets.connect`` would hand back)."""
        client = FakeClient(self)
        self.clients.append(client)
        return client


class FakeClient:
    """One connection; ``deliver`` and ``drop`` play the server's side of it."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.closed = False
        self.on_message: Callable[[str], None] = lambda text: None
        self.on_close: Callable[[], None] = lambda: None

    def connect(self) -> None:
        """Open the connection, or raise ``ConnectionRefusedError`` like a real client."""
        self.server.connects += 1
        if self.server.refuse:
            self.server.refuse -= 1
            raise ConnectionRefusedError("server refused the connection")

    def close(self) -> None:
        """Close the connection (idempotent, as real clients are)."""
        self.closed = True

    def deliver(self, text: str) -> None:
        """The server sends a message."""
        self.on_message(text)

    def drop(self) -> None:
        """The server goes away."""
        self.on_close()


def socket_logic(server: FakeServer, policy: RetryPolicy) -> MachineLogic:
    """The services and actions ``machine.json`` names, merged with the policy's logic."""
    live: list[FakeClient] = []

    def open_socket(interp: Any, ctx: dict[str, Any], event: Any) -> None:
        client = server.client()
        client.connect()  # raises -> onError -> reconnecting
        live.append(client)

    def listen(send_back: Any, receive: Any, ctx: dict[str, Any], event: Any) -> Callable[[], None]:
        client = live[-1]
        client.on_message = lambda text: send_back({"type": "MESSAGE", "text": text})
        client.on_close = lambda: send_back("DROPPED")
        return client.close  # cleanup, exactly once, whichever way connected is left

    def keep_message(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        ctx["messages"] = [*ctx.get("messages", []), event.payload.get("text")]

    own = MachineLogic(
        services={"openSocket": open_socket, "listen": from_callback(listen)},
        actions={"keepMessage": keep_message},
    )
    return own.merge(policy.logic())


def default_policy(seed: int | None = None) -> RetryPolicy:
    """Full-jitter backoff from one second; seed the rng for exact delays in tests."""
    rng = random.Random(seed).random if seed is not None else random.random
    return RetryPolicy(
        max_attempts=MAX_ATTEMPTS, base_ms=1_000, max_ms=30_000, jitter="full", rng=rng
    )


def build_machine(server: FakeServer, policy: RetryPolicy) -> Any:
    """The machine for ``server`` (a real app would pass its client factory instead)."""
    return create_machine(CHART, logic=socket_logic(server, policy))


def main() -> None:
    """A drop, a backoff, a reconnect, then an outage long enough to give up."""
    server, clock = FakeServer(), SimulatedClock()
    socket = SyncInterpreter(build_machine(server, default_policy(seed=7)), clock=clock).start()
    socket.send("CONNECT")
    print("after CONNECT:", socket.value)
    server.clients[-1].drop()
    clock.increment(0)
    print("after a drop:", socket.value, "- next try in", socket.context["attempt_delay_ms"], "ms")
    clock.increment(socket.context["attempt_delay_ms"])
    print("after the backoff:", socket.value, "- attempt counter", socket.context["attempt"])
    server.refuse = 99
    server.clients[-1].drop()
    clock.increment(0)
    while socket.value == "reconnecting":
        clock.increment(socket.context["attempt_delay_ms"])
    print("server down:", socket.value, "after", server.connects, "connects in all")


if __name__ == "__main__":
    main()
