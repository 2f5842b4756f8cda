"""Reading snapshots written by xstate-statemachine 0.11.0 (layout versions 0 to 4).

A user moving over from 0.11.0 has snapshots in a store or on disk; they should restore
here without a migration script. Two shapes arrive: the snapshot itself (``get_snapshot()``
or ``get_persisted_snapshot()``, with a ``version`` key and no ``format``), and the record
0.11.0's ``FileStore`` writes around it (``format``, ``key``, ``version`` and the snapshot as
a string under ``snapshot``). :func:`normalise` turns either into this engine's layout, so
the rest of the restore checks it like any other snapshot: every state id, history entry and
deadline is still validated against the chart.

What carries over: status, context, active states, output, ``after`` deadlines, history,
delayed events sent to the machine itself (``scheduled_sends``), events accepted but not yet
processed (``pending_events``: delivered on the next ``send()``, ``tick()`` or clock
increment, before anything newer) and child machines (``actors``, each restored from its own
0.11.0 snapshot). What does not: its structure hash (computed another way, so not compared),
``deferred`` events and engine-event records (features this engine does not have), and the
``system`` registry.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from xsm_celery.engine.state import NOT_STARTED, STOPPED
from xsm_celery.errors import SnapshotCorruptError

if TYPE_CHECKING:
    from xsm_celery.engine.machine import Machine

__all__ = ["V011_LAYOUT_VERSION", "from_v011", "is_store_record", "is_v011", "normalise"]

logger = logging.getLogger("xsm_celery.engine")

#: The newest snapshot layout 0.11.0 writes; newer ones are refused rather than guessed at.
V011_LAYOUT_VERSION = 4

_STATUS = {"uninitialized": NOT_STARTED, "error": STOPPED}


def is_store_record(data: Mapping[str, Any]) -> bool:
    """Whether ``data`` is a 0.11.0 store record wrapping a snapshot (``FileStore`` writes it)."""
    return "snapshot" in data and "key" in data and "machine_id" not in data


def is_v011(data: Mapping[str, Any]) -> bool:
    """Whether ``data`` is a snapshot in one of 0.11.0's layouts (ours always has ``format``)."""
    return "format" not in data and "state_ids" in data


def normalise(data: dict[str, Any], machine: Machine) -> dict[str, Any]:
    """``data`` in this engine's layout: unwrapped from a store record, translated if 0.11.0's.

    A snapshot already in this engine's layout is returned unchanged.

    Raises:
        SnapshotCorruptError: a store record whose snapshot is not a JSON object, or a layout
            newer than 0.11.0's.
    """
    if is_store_record(data):
        inner = data["snapshot"]
        if isinstance(inner, (str, bytes, bytearray)):
            try:
                inner = json.loads(inner)
            except (ValueError, UnicodeDecodeError) as exc:
                raise SnapshotCorruptError(
                    f"the store record's 'snapshot' is not valid JSON: {exc}"
                ) from exc
        if not isinstance(inner, dict):
            raise SnapshotCorruptError("the store record's 'snapshot' must be a JSON object")
        data = inner
    if is_v011(data):
        return from_v011(data, machine)
    return data


def from_v011(data: Mapping[str, Any], machine: Machine) -> dict[str, Any]:
    """Translate a 0.11.0 snapshot (``version`` 0 to 4) into this engine's layout.

    Version 0 snapshots carry no machine id; like 0.11.0, they are taken to be of
    ``machine`` (their state ids are still checked against it).

    Raises:
        SnapshotCorruptError: a field has the wrong shape, or the layout is newer than 4.
    """
    version = data.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise SnapshotCorruptError(f"snapshot field 'version' must be an integer: {version!r}")
    if version > V011_LAYOUT_VERSION:
        raise SnapshotCorruptError(
            f"snapshot layout version {version} is newer than 0.11.0's "
            f"({V011_LAYOUT_VERSION}); restore it with the library that wrote it"
        )
    converted = dict(data)
    machine_id = data.get("machine_id", machine.id)
    converted["machine_id"] = machine_id
    if machine_id == machine.id:
        converted["machine_hash"] = machine.structure_hash
    status = data.get("status")
    converted["status"] = _STATUS.get(status, status) if isinstance(status, str) else status
    converted["deadlines"] = _deadlines(data.get("deadlines") or [])
    converted["history"] = _history(data.get("history") or {}, machine)
    taken_at = data.get("taken_at")
    wall = float(taken_at) if isinstance(taken_at, (int, float)) else None
    converted["delayed"] = _delayed(data.get("scheduled_sends") or [], wall)
    converted["pending"] = _user_events(data.get("pending_events") or [], "pending_events")
    converted["children"] = _children(data.get("actors") or {}, data, machine)
    return converted


def _list(raw: Any, name: str) -> list[Any]:
    if not isinstance(raw, list):
        raise SnapshotCorruptError(f"snapshot field {name!r} must be a list")
    return raw


def _record(item: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise SnapshotCorruptError(f"snapshot {what} is not an object: {item!r:.80}")
    return item


def _text(item: Mapping[str, Any], key: str, what: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise SnapshotCorruptError(f"snapshot {what} lacks {key!r}: {item!r:.120}")
    return value


def _deadlines(raw: Any) -> list[dict[str, Any]]:
    """0.11.0's deadlines gain the ``after`` key, read off the timer's event type."""
    deadlines = []
    for item in _list(raw, "deadlines"):
        record = _record(item, "deadline")
        state_id = _text(record, "state_id", "deadline")
        event_type = _text(record, "event_type", "deadline")
        key = event_type.removeprefix("after.").removesuffix(f".{state_id}")
        deadlines.append({**record, "key": key})
    return deadlines


def _history(raw: Any, machine: Machine) -> dict[str, list[str]]:
    """0.11.0 keys history by the parent state and lists every state it remembers.

    Here each history state keeps the leaves (deep) or the active children (shallow) and
    enters the rest by default, so each history child of the parent gets its own list.
    """
    if not isinstance(raw, Mapping):
        raise SnapshotCorruptError("snapshot field 'history' must be an object")
    history: dict[str, list[str]] = {}
    for parent_id, state_ids in raw.items():
        parent = machine.find_state(parent_id) if isinstance(parent_id, str) else None
        if parent is None:
            raise SnapshotCorruptError(f"snapshot history names {parent_id!r}, not a state")
        nodes = [
            machine.find_state(i) if isinstance(i, str) else None
            for i in _list(state_ids, f"history of {parent_id}")
        ]
        for hist in parent.history_children:
            deep = hist.history == "deep"
            history[hist.id] = [
                n.id
                for n in nodes
                if n is not None and (not n.children if deep else n.parent is parent)
            ]
    return history


def _user_event(item: Any, name: str) -> dict[str, Any] | None:
    """The user event of one 0.11.0 event record; an engine-event record is dropped (logged)."""
    record = _record(item, f"{name} entry")
    if record.get("kind", "event") != "event":
        logger.warning(
            "0.11.0 snapshot: dropped a %r record of %s (%s); this engine does not persist "
            "engine events",
            record.get("kind"),
            name,
            record.get("type"),
        )
        return None
    payload = record.get("payload") or {}
    if not isinstance(payload, dict):
        raise SnapshotCorruptError(f"snapshot {name} entry has a bad payload: {item!r:.120}")
    return {"type": _text(record, "type", f"{name} entry"), "payload": payload}


def _user_events(raw: Any, name: str) -> list[dict[str, Any]]:
    events = (_user_event(item, name) for item in _list(raw, name))
    return [event for event in events if event is not None]


def _delayed(raw: Any, taken_at: float | None) -> list[dict[str, Any]]:
    """Delayed sends to the machine itself, due at the same wall time as when saved."""
    delayed = []
    for record in _list(raw, "scheduled_sends"):
        event = _user_event(record, "scheduled_sends")
        if event is None:
            continue
        remaining = record.get("remaining_ms")
        if taken_at is None or not isinstance(remaining, (int, float)) or remaining < 0:
            raise SnapshotCorruptError(
                f"snapshot scheduled send {record!r:.120} needs 'remaining_ms' and the "
                "snapshot's 'taken_at'"
            )
        send_id = record.get("send_id")
        delayed.append(
            {
                "event": event,
                "to": None,
                "id": None if send_id is None else str(send_id),
                "delay_ms": float(remaining),
                "due_at_wall": taken_at + float(remaining) / 1000.0,
            }
        )
    return delayed


def _children(raw: Any, data: Mapping[str, Any], machine: Machine) -> dict[str, Any]:
    """0.11.0's actors as child machines: the id it knows (``parent:kid`` is ``kid`` here)."""
    if not isinstance(raw, Mapping):
        raise SnapshotCorruptError("snapshot field 'actors' must be an object")
    active = set(data.get("configuration") or [])
    children: dict[str, Any] = {}
    for actor_id, item in raw.items():
        record = _record(item, f"actor {actor_id!r}")
        snapshot = record.get("snapshot")
        if not isinstance(actor_id, str) or not isinstance(snapshot, dict):
            raise SnapshotCorruptError(f"snapshot actor {actor_id!r} is malformed")
        declared = actor_id.removeprefix(f"{machine.id}:").split(":")[0]
        owner = next(
            (
                node
                for node in machine.nodes
                if node.id in active and any(inv.id == declared for inv in node.invoke)
            ),
            None,
        )
        children[declared] = {
            "src": record.get("src"),
            "owner": machine.root.id if owner is None else owner.id,
            "spawned": owner is None,
            "snapshot": snapshot,
        }
    return children
