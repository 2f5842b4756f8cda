"""The async interpreter stays responsive while it works through a long chain of events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from xsm_celery import Interpreter, MachineLogic, create_machine
from xsm_celery.engine.chains import YIELD_EVERY
from xsm_celery.errors import RunawayChainError

CHAIN = 20 * YIELD_EVERY


def counting_machine(limit: int, seen: list[int], ticks: list[int], **kwargs: Any) -> Any:
    """TICK raises TICK until ``n == limit``; each step records how far the ticker got."""

    def bump(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        ctx["n"] += 1
        seen.append(ticks[0])

    chart = {
        "id": "m",
        "initial": "on",
        "context": {"n": 0},
        "states": {
            "on": {
                "on": {
                    "TICK": {
                        "guard": "more",
                        "actions": ["bump", {"type": "raise", "params": {"event": "TICK"}}],
                    },
                    "MARK": {"actions": "mark"},
                    "HALT": "off",
                }
            },
            "off": {},
        },
    }
    logic = MachineLogic(
        actions={
            "bump": bump,
            "mark": lambda i, ctx, e, a: ctx.setdefault("marks", []).append((ctx["n"], e.payload)),
        },
        guards={"more": lambda ctx, e: ctx["n"] < limit},
    )
    return create_machine(chart, logic=logic, **kwargs)


async def ticker(ticks: list[int], stop: asyncio.Event) -> None:
    """Count loop turns until told to stop."""
    while not stop.is_set():
        ticks[0] += 1
        await asyncio.sleep(0)


def test_another_coroutine_runs_while_a_long_chain_is_worked_through() -> None:
    """A 2,000-microstep chain gives the loop turns: the ticker advances during it."""
    seen: list[int] = []
    ticks = [0]

    async def main() -> Any:
        interp = await Interpreter(
            counting_machine(CHAIN, seen, ticks, max_iterations=5 * CHAIN)
        ).start()
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(ticks, stop))
        await asyncio.sleep(0)
        receipt = await interp.send("TICK", wait=True)
        stop.set()
        await task
        return interp, receipt

    interp, receipt = asyncio.run(main())
    assert interp.context["n"] == CHAIN
    assert receipt.changed
    assert receipt.state_ids == frozenset({"m.on"})
    # The ticker ran between slices: the chain saw it at (about) one value per slice.
    assert len(set(seen)) >= CHAIN // YIELD_EVERY - 1
    assert seen == sorted(seen)


def test_events_other_coroutines_send_during_the_chain_run_after_it_in_order() -> None:
    """Sends from elsewhere wait for the open run, then run one by one with their receipts."""
    seen: list[int] = []
    ticks = [0]

    async def main() -> Any:
        interp = await Interpreter(
            counting_machine(CHAIN, seen, ticks, max_iterations=5 * CHAIN)
        ).start()
        chain = interp.send("TICK", wait=True)

        async def other(index: int) -> Any:
            return await interp.send("MARK", wait=True, index=index)

        receipts = await asyncio.gather(chain, other(1), other(2))
        return interp, receipts

    interp, receipts = asyncio.run(main())
    assert [payload["index"] for _, payload in interp.context["marks"]] == [1, 2]
    assert all(n == CHAIN for n, _ in interp.context["marks"])
    assert all(r.changed for r in receipts)


def test_a_runaway_found_after_the_first_slice_is_raised_to_the_awaiting_sender() -> None:
    """The bound is hit in a continued slice: awaiting send() raises; the machine goes on."""
    seen: list[int] = []
    ticks = [0]

    async def main() -> Any:
        interp = await Interpreter(
            counting_machine(CHAIN, seen, ticks, max_iterations=CHAIN // 2)
        ).start()
        with pytest.raises(RunawayChainError):
            await interp.send("TICK")
        await interp.send("HALT")
        return interp

    interp = asyncio.run(main())
    assert interp.context["n"] == CHAIN // 2
    assert interp.current_state_ids == {"m.off"}


def test_stop_during_an_open_run_ends_it() -> None:
    """stop() while the chain is between slices: the run ends, the awaiting send returns."""
    seen: list[int] = []
    ticks = [0]

    async def main() -> Any:
        interp = await Interpreter(
            counting_machine(CHAIN, seen, ticks, max_iterations=5 * CHAIN)
        ).start()
        sent = interp.send("TICK", wait=True)
        await interp.stop()
        receipt = await sent
        return interp, receipt

    interp, receipt = asyncio.run(main())
    assert interp.status == "stopped"
    assert 0 < interp.context["n"] < CHAIN
    assert receipt.state_ids == frozenset({"m.on"})
