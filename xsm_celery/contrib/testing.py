"""Test helpers for event-driven machines: the in-memory brokers and event replay.

``replay`` rebuilds an instance from the events it received, on a ``SimulatedClock``;
``assert_replay_consistent`` checks that a stored instance is what its events produce,
which catches a chart or logic change that would make old instances diverge. Neither
needs pytest; the brokers are the core's (``xsm_celery.eda``), re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from xsm_celery.eda.envelope import Envelope
from xsm_celery.eda.fake import BrokerPublishError, FakeBrokerAdapter, SyncFakeBrokerAdapter
from xsm_celery.engine import Machine, SimulatedClock, SyncInterpreter, public_context
from xsm_celery.errors import ArgumentTypeError

__all__ = [
    "BrokerPublishError",
    "FakeBrokerAdapter",
    "SyncFakeBrokerAdapter",
    "assert_replay_consistent",
    "replay",
]


def replay(
    machine: Machine,
    events: Iterable[Any],
    *,
    clock: SimulatedClock | None = None,
    plugins: Iterable[Any] = (),
) -> SyncInterpreter:
    """Run a fresh instance of ``machine`` through ``events`` and return it, still running.

    Each item is an ``Envelope`` (its event is sent), an event (``"NAME"``, an ``Event``
    or a ``{"type": ...}`` mapping), or a number: milliseconds to advance the clock by,
    firing the ``after`` timers due meanwhile. Stop the interpreter when done with it.
    """
    timer = clock if clock is not None else SimulatedClock()
    interp = SyncInterpreter(machine, timer)
    for plugin in plugins:
        interp.use(plugin)
    interp.start()
    for item in events:
        if isinstance(item, bool):
            raise ArgumentTypeError(
                "replay() items are events, envelopes or milliseconds, not bools"
            )
        if isinstance(item, int | float):
            timer.increment(item)
        elif isinstance(item, Envelope):
            interp.send(item.to_event())
        else:
            interp.send(item)
    return interp


def _state_of(expected: Any) -> tuple[set[str], dict[str, Any]]:
    """Active leaves and public context of a snapshot, a stored record or an interpreter."""
    if isinstance(expected, SyncInterpreter):
        return set(expected.current_state_ids), public_context(expected.context)
    text = getattr(expected, "snapshot", expected)
    data = json.loads(text) if isinstance(text, str | bytes) else text
    if not isinstance(data, Mapping):
        raise ArgumentTypeError(f"cannot compare against {type(expected).__name__}")
    return set(data.get("state_ids", ())), public_context(data.get("context", {}))


def assert_replay_consistent(
    machine: Machine,
    events: Iterable[Any],
    expected: Any,
    *,
    clock: SimulatedClock | None = None,
) -> SyncInterpreter:
    """Replay ``events`` and assert the result matches ``expected``; return the replay.

    ``expected`` is a snapshot (JSON text or dict), a ``StoredSnapshot`` or an
    interpreter; the active states and the public context must be equal.

    Raises:
        AssertionError: naming what differs.
    """
    interp = replay(machine, events, clock=clock)
    got_states, got_context = set(interp.current_state_ids), public_context(interp.context)
    want_states, want_context = _state_of(expected)
    problems: list[str] = []
    if got_states != want_states:
        problems.append(f"states {sorted(got_states)} != expected {sorted(want_states)}")
    for key in sorted(set(got_context) | set(want_context)):
        if got_context.get(key) != want_context.get(key):
            problems.append(
                f"context[{key!r}] {got_context.get(key)!r} != expected {want_context.get(key)!r}"
            )
    if problems:
        interp.stop()
        raise AssertionError("replay diverged: " + "; ".join(problems))
    return interp
