"""from_callback actors: send_back, receive, and a cleanup that runs exactly once."""

from __future__ import annotations

from typing import Any

from tests.engine.drivers import Interp
from xsm_celery import MachineLogic, SimulatedClock, create_machine, from_callback
from xsm_celery.engine import CallbackLogic


class Socket:
    """A fake connection that counts closes and remembers what it was sent."""

    def __init__(self) -> None:
        self.closed = 0
        self.sent: list[Any] = []
        self.send_back: Any = None


def chart() -> dict[str, Any]:
    """'connected' runs the 'listen' actor; several ways out of it."""
    return {
        "id": "ws",
        "initial": "idle",
        "context": {"messages": []},
        "states": {
            "idle": {"on": {"OPEN": "connected"}},
            "connected": {
                "invoke": {"src": "listen", "id": "sock", "onError": "broken"},
                "on": {
                    "MESSAGE": {"actions": "store"},
                    "DROPPED": "idle",
                    "RECONNECT": {"target": "connected", "reenter": True},
                    "FINISH": "end",
                },
                "after": {"5000": "idle"},
            },
            "broken": {},
            "end": {"type": "final"},
        },
    }


def machine_for(sockets: list[Socket], fail: bool = False) -> Any:
    """A machine whose 'listen' actor opens a new Socket each time."""

    def listen(send_back: Any, receive: Any, ctx: Any, event: Any) -> Any:
        if fail:
            raise ConnectionRefusedError("no server")
        sock = Socket()
        sock.send_back = send_back
        receive(sock.sent.append)
        sockets.append(sock)

        def close() -> None:
            sock.closed += 1

        return close

    logic = MachineLogic(
        services={"listen": from_callback(listen)},
        actions={"store": lambda i, c, e, a: c["messages"].append(e.payload["text"])},
    )
    return create_machine(chart(), logic=logic)


def test_send_back_delivers_on_the_next_step() -> None:
    """Events posted with send_back run at the owner's next send, tick or clock increment."""
    sockets: list[Socket] = []
    clock = SimulatedClock()
    interp = Interp(machine_for(sockets), clock=clock).start()
    interp.send("OPEN")
    sockets[0].send_back("MESSAGE", text="hi")
    assert interp.context["messages"] == []
    interp.tick()
    assert interp.context["messages"] == ["hi"]
    sockets[0].send_back("MESSAGE", text="again")
    clock.increment(0)
    assert interp.context["messages"] == ["hi", "again"]


def test_cleanup_runs_once_when_the_state_exits() -> None:
    """Leaving the invoking state calls the cleanup exactly once."""
    sockets: list[Socket] = []
    interp = Interp(machine_for(sockets)).start()
    interp.send("OPEN")
    interp.send("DROPPED")
    interp.send("DROPPED")
    assert [s.closed for s in sockets] == [1]


def test_cleanup_runs_on_reentry_timer_exit_stop_and_done() -> None:
    """Re-entry, a timer, stop() and reaching a final state each clean up the live actor once."""
    sockets: list[Socket] = []
    clock = SimulatedClock()
    interp = Interp(machine_for(sockets), clock=clock).start()
    interp.send("OPEN")
    interp.send("RECONNECT")
    clock.increment(5000)
    interp.send("OPEN")
    interp.send("FINISH")
    interp.send("OPEN")
    interp.stop()
    interp.stop()
    assert [s.closed for s in sockets] == [1, 1, 1]
    assert interp.status == "done"


def test_stop_cleans_up_a_running_actor_once() -> None:
    """stop() while the actor runs calls its cleanup once; a second stop does nothing."""
    sockets: list[Socket] = []
    interp = Interp(machine_for(sockets)).start()
    interp.send("OPEN")
    interp.stop()
    interp.stop()
    assert sockets[0].closed == 1
    assert interp.status == "stopped"


def test_events_from_a_stopped_actor_are_dropped() -> None:
    """After cleanup, the old actor's send_back no longer reaches the machine."""
    sockets: list[Socket] = []
    interp = Interp(machine_for(sockets)).start()
    interp.send("OPEN")
    old = sockets[0]
    interp.send("DROPPED")
    interp.send("OPEN")
    old.send_back("MESSAGE", text="ghost")
    interp.tick()
    assert interp.context["messages"] == []


def test_receive_gets_events_sent_to_the_actor() -> None:
    """interp.send_to(actor_id, ...) reaches the handlers registered with receive()."""
    sockets: list[Socket] = []
    interp = Interp(machine_for(sockets)).start()
    interp.send("OPEN")
    interp.send_to("sock", "PING", n=1)
    assert [(e.type, e.payload) for e in sockets[0].sent] == [("PING", {"n": 1})]
    assert set(interp.children) == {"sock"}
    interp.send("DROPPED")
    assert interp.children == {}
    interp.send_to("sock", "PING")


def test_setup_that_raises_goes_to_on_error() -> None:
    """An exception from the setup function is the invocation's error."""
    interp = Interp(machine_for([], fail=True)).start()
    interp.send("OPEN")
    assert interp.value == "broken"
    assert interp.children == {}


def test_callback_logic_is_callable_directly() -> None:
    """from_callback returns a CallbackLogic that calls the setup when called."""
    seen: list[Any] = []
    logic = from_callback(lambda send_back, receive, ctx, event: seen.append(ctx))
    assert isinstance(logic, CallbackLogic)
    logic(None, None, {"a": 1}, None)  # type: ignore[arg-type]
    assert seen == [{"a": 1}]
