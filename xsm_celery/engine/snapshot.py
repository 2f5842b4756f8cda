"""Snapshots: a machine at rest as JSON, and its restoration in another process.

A snapshot holds what is needed to carry on: the active leaves, the context, the status and
every pending ``after`` timer with its wall-clock due time, so a timer armed in one process
fires in the next (at once if it is already overdue). Running callback actors and async
services are not in it: they belong to a process. Restoring never trusts its input: size is
checked before parsing, and every field is validated, so a damaged or foreign snapshot raises
a :class:`SnapshotError` subclass and never a raw ``json`` or ``KeyError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.children import restore_children, saved_children
from xsm_celery.engine.events import Event
from xsm_celery.engine.snapshot_v011 import normalise
from xsm_celery.engine.state import DONE, NOT_STARTED, RUNNING, STOPPED
from xsm_celery.engine.step import leaves_of
from xsm_celery.engine.timers import Timer, push_timer
from xsm_celery.errors import (
    SnapshotCorruptError,
    SnapshotError,
    SnapshotMismatchError,
    SnapshotTooLargeError,
)

if TYPE_CHECKING:
    from xsm_celery.engine.chart import StateNode
    from xsm_celery.engine.clock import Clock
    from xsm_celery.engine.machine import Machine
    from xsm_celery.engine.runtime import Core

__all__ = [
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "SNAPSHOT_FORMAT",
    "dump",
    "persisted_snapshot",
    "restore",
    "snapshot_dict",
]

#: Version of the snapshot layout written by :func:`snapshot_dict`.
SNAPSHOT_FORMAT = 1

#: Largest serialised snapshot (1 MiB): :func:`restore` checks it before parsing, and every
#: snapshot store refuses a larger one on save (``persistence.memory`` re-exports it).
DEFAULT_MAX_SNAPSHOT_BYTES = 1024 * 1024

_STATUSES = (NOT_STARTED, RUNNING, DONE, STOPPED)


def snapshot_dict(core: Core) -> dict[str, Any]:
    """The snapshot of ``core`` as a JSON-ready dict (context is not copied)."""
    machine = core.machine
    now = core.clock.now()
    wall = core.clock.wall_now()
    deadlines = [
        {
            "state_id": t.node.id,
            "key": t.after.key,
            "event_type": t.after.event_type,
            "delay_ms": t.delay_ms,
            "due_at_wall": wall + (t.due - now) / 1000.0,
        }
        for t in core.pending_timers()
        if t.after is not None
    ]
    delayed = (
        [
            {
                "event": t.event.to_dict(),
                "to": t.target,
                "id": t.send_id,
                "delay_ms": t.delay_ms,
                "due_at_wall": wall + (t.due - now) / 1000.0,
            }
            for t in sorted(core._delayed, key=lambda t: t.due)
            if t.event is not None and not t.cancelled
        ]
        if core._delayed
        else []
    )
    return {
        "format": SNAPSHOT_FORMAT,
        "machine_id": machine.id,
        "machine_hash": machine.structure_hash,
        "machine_version": machine.version,
        "taken_at": wall,
        "status": core.status,
        "value": core.value,
        "state_ids": sorted(s.id for s in core.active_leaves),
        "context": core.context,
        "deadlines": deadlines,
        "delayed": delayed,
        "output": core.output,
        "children": saved_children(core, snapshot_dict) if core._actors else {},
        "history": {hist.id: [s.id for s in kept] for hist, kept in core._history.items()},
    }


def dump(core: Core) -> str:
    """The snapshot of ``core`` as a JSON string.

    Raises:
        SnapshotError: the context holds a value JSON cannot encode.
    """
    try:
        return json.dumps(snapshot_dict(core), separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SnapshotError(
            f"cannot snapshot machine {core.machine.id!r}: {exc}; keep context JSON-friendly "
            "(str, numbers, bool, None, lists, dicts with str keys)"
        ) from exc


def persisted_snapshot(core: Core) -> dict[str, Any]:
    """The snapshot as a JSON-safe dict that shares nothing with ``core`` (a parsed dump).

    Raises:
        SnapshotError: the context holds a value JSON cannot encode.
    """
    return json.loads(dump(core))  # type: ignore[no-any-return]


def parse(snapshot: str | bytes | Mapping[str, Any], max_bytes: int) -> dict[str, Any]:
    """Check size, then parse, then check the top-level shape."""
    if isinstance(snapshot, Mapping):
        return dict(snapshot)
    if isinstance(snapshot, str):
        size = len(snapshot) if len(snapshot) * 4 <= max_bytes else len(snapshot.encode())
    elif isinstance(snapshot, (bytes, bytearray)):
        size = len(snapshot)
    else:
        raise SnapshotCorruptError(
            f"a snapshot is a JSON str or a dict, got {type(snapshot).__name__}"
        )
    if size > max_bytes:
        raise SnapshotTooLargeError(
            f"snapshot is {size} bytes, over the {max_bytes}-byte cap; raise max_bytes= if "
            "this machine's context is legitimately that large"
        )
    try:
        data = json.loads(snapshot)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotCorruptError(f"snapshot is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SnapshotCorruptError(f"snapshot must be a JSON object, got {type(data).__name__}")
    return data


def _field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in data:
        raise SnapshotCorruptError(f"snapshot lacks the {name!r} field")
    value = data[name]
    if not isinstance(value, kind):
        raise SnapshotCorruptError(f"snapshot field {name!r} has the wrong type: {value!r:.80}")
    return value


def check_machine(
    data: Mapping[str, Any],
    machine: Machine,
    verify_machine_hash: bool,
    expected_machine_hash: str | None,
) -> None:
    """Refuse a snapshot of another machine, or of another structure of this one."""
    machine_id = _field(data, "machine_id", str)
    if machine_id != machine.id:
        raise SnapshotMismatchError(
            f"snapshot is of machine {machine_id!r}, not {machine.id!r}; restore it with its "
            "own chart"
        )
    taken_hash = data.get("machine_hash")
    if not verify_machine_hash or taken_hash == machine.structure_hash:
        return
    if expected_machine_hash is not None and taken_hash == expected_machine_hash:
        return
    raise SnapshotMismatchError(
        f"snapshot of {machine.id!r} was taken from structure {taken_hash!r}, the chart is now "
        f"{machine.structure_hash!r}; drain old instances first, or pass "
        "verify_machine_hash=False (or expected_machine_hash=the old hash) to restore anyway"
    )


def configuration(machine: Machine, state_ids: Iterable[Any]) -> frozenset[StateNode]:
    """The full configuration for a list of leaf ids, checked to be a legal one."""
    config: set[StateNode] = set()
    for state_id in state_ids:
        node = machine.find_state(state_id) if isinstance(state_id, str) else None
        if node is None or node.children or node.type == "history":
            raise SnapshotCorruptError(f"snapshot names {state_id!r}, not a leaf of {machine.id}")
        config.add(node)
        config.update(node.ancestors)
    for node in config:
        active = [c for c in node.children if c in config]
        if node.type == "compound" and len(active) != 1:
            raise SnapshotCorruptError(
                f"snapshot has {len(active)} active children under {node.id!r}; need exactly 1"
            )
        if node.type == "parallel" and len(active) != len(node.children):
            raise SnapshotCorruptError(f"snapshot lacks a region of parallel state {node.id!r}")
    return frozenset(config)


def remembered_history(machine: Machine, raw: Any) -> dict[StateNode, tuple[StateNode, ...]]:
    """What the snapshot's history states remember, checked against the chart."""
    if not isinstance(raw, Mapping):
        raise SnapshotCorruptError("snapshot field 'history' must be an object")
    remembered: dict[StateNode, tuple[StateNode, ...]] = {}
    for hist_id, state_ids in raw.items():
        hist = machine.find_state(hist_id) if isinstance(hist_id, str) else None
        if hist is None or hist.type != "history" or hist.parent is None:
            raise SnapshotCorruptError(f"snapshot history names {hist_id!r}, not a history state")
        if not isinstance(state_ids, list):
            raise SnapshotCorruptError(f"snapshot history of {hist_id!r} must be a list of ids")
        kept = []
        for state_id in state_ids:
            node = machine.find_state(state_id) if isinstance(state_id, str) else None
            if node is None or hist.parent not in node.ancestor_set:
                raise SnapshotCorruptError(
                    f"snapshot history of {hist_id!r} names {state_id!r}, not a state inside "
                    f"{hist.parent.id!r}"
                )
            kept.append(node)
        remembered[hist] = tuple(kept)
    return remembered


def rearm(core: Core, deadlines: Any) -> None:
    """Re-create pending timers, due at the same wall-clock time as when they were saved."""
    if not isinstance(deadlines, list):
        raise SnapshotCorruptError("snapshot field 'deadlines' must be a list")
    wall = core.clock.wall_now()
    now = core.clock.now()
    for item in deadlines:
        if not isinstance(item, Mapping):
            raise SnapshotCorruptError(f"snapshot deadline is not an object: {item!r:.80}")
        node = core.machine.find_state(_field(item, "state_id", str))
        key = _field(item, "key", str)
        after = next((a for a in node.after if a.key == key), None) if node else None
        if node is None or after is None or node not in core.configuration:
            raise SnapshotCorruptError(f"snapshot deadline {item!r:.120} names no active timer")
        due_wall = float(_field(item, "due_at_wall", (int, float)))
        delay = float(item.get("delay_ms", after.delay_ms or 0.0))
        # Epoch seconds near 1.7e9 carry ~0.2 us of float error; round it away so a timer
        # saved with 900 ms left fires after exactly 900 ms, not 900.0002.
        remaining = max(0.0, round((due_wall - wall) * 1000.0, 3))
        push_timer(core, Timer(now + remaining, node, after, delay))


def rearm_delayed(core: Core, delayed: Any) -> None:
    """Re-create pending delayed events (``raise``/``sendTo`` with a delay)."""
    if not isinstance(delayed, list):
        raise SnapshotCorruptError("snapshot field 'delayed' must be a list")
    wall = core.clock.wall_now()
    now = core.clock.now()
    for item in delayed:
        if not isinstance(item, Mapping):
            raise SnapshotCorruptError(f"snapshot delayed event is not an object: {item!r:.80}")
        raw = _field(item, "event", dict)
        event_type = raw.get("type")
        payload = raw.get("payload", {})
        if not isinstance(event_type, str) or not event_type or not isinstance(payload, dict):
            raise SnapshotCorruptError(f"snapshot delayed event is malformed: {item!r:.120}")
        target = item.get("to")
        send_id = item.get("id")
        if not isinstance(target, (str, type(None))) or not isinstance(send_id, (str, type(None))):
            raise SnapshotCorruptError(f"snapshot delayed event is malformed: {item!r:.120}")
        due_wall = float(_field(item, "due_at_wall", (int, float)))
        remaining = max(0.0, round((due_wall - wall) * 1000.0, 3))
        delay = float(item.get("delay_ms", remaining))
        timer = Timer(
            now + remaining,
            core.machine.root,
            None,
            delay,
            event=Event(event_type, payload),
            send_id=send_id,
            target=target,
        )
        push_timer(core, timer)


def restore(
    core: Core,
    snapshot: str | bytes | Mapping[str, Any],
    machine: Machine,
    clock: Clock | None,
    *,
    verify_machine_hash: bool = True,
    expected_machine_hash: str | None = None,
    plugins: Iterable[Any] = (),
    max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
) -> None:
    """Set up a blank interpreter from a snapshot; see ``SyncInterpreter.from_snapshot``."""
    data = normalise(parse(snapshot, max_bytes), machine)
    check_machine(data, machine, verify_machine_hash, expected_machine_hash)
    status = _field(data, "status", str)
    if status not in _STATUSES:
        raise SnapshotCorruptError(f"snapshot status {status!r} is not one of {_STATUSES}")
    context = _field(data, "context", dict)
    state_ids = _field(data, "state_ids", list)
    core._setup(machine, clock, context)
    for plugin in plugins:
        core.use(plugin)
    if status == NOT_STARTED:
        return
    core._config = configuration(machine, state_ids)
    core._leaves = leaves_of(core._config)
    core._status = status
    core.output = data.get("output")
    history = data.get("history")
    if history is not None and history != {}:
        core._history = remembered_history(machine, history)
    if status == RUNNING:
        rearm(core, data.get("deadlines", []))
        delayed = data.get("delayed")
        if delayed is not None and delayed != []:
            rearm_delayed(core, delayed)
        children = data.get("children")
        if children is not None and children != {}:
            restore_children(core, children, restore)
        pending = data.get("pending")
        if pending:
            # Only 0.11.0 snapshots carry accepted-but-unprocessed events; the mailbox runs
            # them on the next send(), tick() or clock increment, before anything newer.
            core._mailbox.extend(Event(e["type"], e["payload"]) for e in pending)
        core.clock.attach(core)
        core._timers_armed()
