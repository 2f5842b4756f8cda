"""Events a machine receives, the receipt of one, and the names only the engine may mint.

Engine events (``done.invoke.*``, ``error.platform.*``, ``done.state.*``, ``after.*`` and
anything under ``xstate.``) drive ``onDone``, ``onError`` and ``after`` transitions. They are
created inside the engine as :class:`EngineEvent` instances; ``send()`` refuses those names so
a caller (or a message off a bus) cannot complete a service or fire a timer by spelling its
event.

A payload may nest dicts, lists and tuples at most :data:`MAX_EVENT_DEPTH` levels deep (the
payload dict is level 1): past that, copying it into the context, snapshotting it or logging
it would hit Python's recursion limit somewhere far from the ``send()`` that brought it in, so
``send()`` refuses it with :class:`InvalidEventError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from xsm_celery.errors import InvalidEventError

__all__ = [
    "ENGINE_EVENT_PREFIXES",
    "MAX_EVENT_DEPTH",
    "EngineEvent",
    "Event",
    "Receipt",
    "after_event_type",
    "check_payload_depth",
    "done_invoke_type",
    "done_state_type",
    "error_platform_type",
    "is_descriptor",
    "is_engine_event_type",
    "matches_descriptor",
    "nested_deeper_than",
    "to_event",
]

#: Event-name prefixes reserved for events the engine creates itself.
ENGINE_EVENT_PREFIXES: tuple[str, ...] = (
    "done.invoke.",
    "error.platform.",
    "done.state.",
    "after.",
    "xstate.",
)


#: Deepest nesting of dicts, lists and tuples an event payload may have (the payload itself
#: is level 1). Twice the workflow door's ``MAX_PAYLOAD_DEPTH``, and far below what
#: ``copy.deepcopy`` or ``json.dumps`` need to stay inside Python's recursion limit.
MAX_EVENT_DEPTH = 64

#: Types that hold no other value: a payload made of these alone needs no depth walk.
_LEAF_TYPES = frozenset({str, int, float, bool, type(None)})


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests dicts, lists and tuples more than ``limit`` levels deep.

    ``value`` itself is level 1. The walk uses an explicit stack, so no depth can raise
    ``RecursionError`` here, and it stops at the limit, so a container that holds itself
    counts as too deep instead of looping.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        for child in children:
            if type(child) not in _LEAF_TYPES:
                stack.append((child, depth + 1))
    return False


def check_payload_depth(event_type: str, payload: dict[str, Any]) -> None:
    """Refuse a payload nested deeper than :data:`MAX_EVENT_DEPTH`.

    Raises:
        InvalidEventError: the payload is too deep (or contains itself).
    """
    for value in payload.values():
        if type(value) not in _LEAF_TYPES:
            break
    else:
        return
    if nested_deeper_than(payload, MAX_EVENT_DEPTH):
        raise InvalidEventError(
            f"event {event_type!r}: the payload is nested more than {MAX_EVENT_DEPTH} "
            "dicts/lists deep (or contains itself); flatten it, or store the document "
            "elsewhere and send its id"
        )


class Event:
    """An event: a ``type`` and a ``payload`` dict; ``data`` is set on done/error events only.

    Plain slotted class rather than a dataclass: one is built per ``send()``, so its
    construction cost is on the hot path.
    """

    __slots__ = ("data", "payload", "type")

    def __init__(self, type: str, payload: dict[str, Any] | None = None, data: Any = None) -> None:
        self.type = type
        self.payload = {} if payload is None else payload
        self.data = data

    def __repr__(self) -> str:
        extra = f", data={self.data!r}" if self.data is not None else ""
        return f"{type(self).__name__}(type={self.type!r}, payload={self.payload!r}{extra})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.type, self.payload, self.data) == (other.type, other.payload, other.data)

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        """The ``{type, payload}`` form stores and dead letters keep."""
        return {"type": self.type, "payload": dict(self.payload)}


class EngineEvent(Event):
    """An event the engine created: a timer firing, a service finishing or failing.

    ``origin`` is the id of the invocation or state the event comes from.
    """

    __slots__ = ("origin",)

    def __init__(self, type: str, data: Any = None, origin: str = "") -> None:
        super().__init__(type, {}, data)
        self.origin = origin


class Receipt(NamedTuple):
    """The outcome of one event, as ``send(..., wait=True)`` and ``on_event_processed`` see it.

    Attributes:
        state_ids: Full ids of the active leaves once the event settled.
        changed: A transition (targetless ones included) was taken for this event.
        error: The first error recorded while processing it (an action or an admission
            failure), or None. The machine keeps running either way.
        deferred: Always False here; kept so receipts line up with 0.11.0's field order.
        denied: The active states handle this event but every candidate's guard said no.
        duplicate: A plugin answered the event from ``on_before_send`` (an inbox replay).
    """

    state_ids: frozenset[str]
    changed: bool
    error: BaseException | None = None
    deferred: bool = False
    denied: bool = False
    duplicate: bool = False


def is_engine_event_type(event_type: str) -> bool:
    """Whether ``event_type`` is reserved for events the engine mints itself."""
    return event_type.startswith(ENGINE_EVENT_PREFIXES)


def done_invoke_type(invoke_id: str) -> str:
    """The event type a finished invocation produces."""
    return f"done.invoke.{invoke_id}"


def error_platform_type(invoke_id: str) -> str:
    """The event type a failed invocation produces."""
    return f"error.platform.{invoke_id}"


def done_state_type(state_id: str) -> str:
    """The event type raised when a compound or parallel state completes."""
    return f"done.state.{state_id}"


def after_event_type(delay_key: str, state_id: str) -> str:
    """The event type of an ``after`` timer (0.11.0 spells it ``after.<delay>.<state id>``)."""
    return f"after.{delay_key}.{state_id}"


def to_event(event_or_type: Any, payload: dict[str, Any]) -> Event:
    """Turn the shapes ``send()`` accepts into an :class:`Event`.

    A ``str`` is the type and ``payload`` the keyword arguments; an :class:`Event` is used as
    is (extra keywords are merged into a copy); a mapping needs a non-empty ``type`` and its
    other keys become the payload, except that ``{"type", "payload": {...}}`` (the shape
    :meth:`Event.to_dict` and dead letters use) takes the nested dict as the payload.

    Raises:
        InvalidEventError: for any other value, or a missing or empty type, or a payload
            nested deeper than :data:`MAX_EVENT_DEPTH`.
    """
    if type(event_or_type) is str:
        if not event_or_type:
            raise InvalidEventError("event type is empty; send('NAME') or send({'type': ...})")
        if payload:
            check_payload_depth(event_or_type, payload)
        return Event(event_or_type, payload)
    if isinstance(event_or_type, Event):
        if payload:
            merged = Event(event_or_type.type, {**event_or_type.payload, **payload})
            check_payload_depth(merged.type, merged.payload)
            return merged
        if event_or_type.payload:
            check_payload_depth(event_or_type.type, event_or_type.payload)
        return event_or_type
    if isinstance(event_or_type, Mapping):
        etype = event_or_type.get("type")
        if not isinstance(etype, str) or not etype:
            raise InvalidEventError(
                f"event mapping needs a non-empty str 'type', got {etype!r}; "
                "send({'type': 'NAME', ...})"
            )
        nested = event_or_type.get("payload")
        if len(event_or_type) == 2 and isinstance(nested, Mapping):
            body = dict(nested)
        else:
            body = {str(k): v for k, v in event_or_type.items() if k != "type"}
        body.update(payload)
        check_payload_depth(etype, body)
        return Event(etype, body)
    if isinstance(event_or_type, str):
        return to_event(str(event_or_type), payload)
    raise InvalidEventError(
        f"cannot send {type(event_or_type).__name__} {event_or_type!r}; "
        "send a str type, an Event or a {'type': ...} mapping"
    )


def is_descriptor(name: str) -> bool:
    """Whether an ``on`` key is a wildcard descriptor: ``*`` or ``prefix.*``."""
    if name == "*":
        return True
    return name.endswith(".*") and "*" not in name[:-2] and len(name) > 2


def matches_descriptor(descriptor: str, event_type: str) -> bool:
    """Whether a wildcard descriptor matches an event type, as XState v5 matches them.

    ``*`` matches every event; ``order.*`` matches ``order`` and every ``order.<...>``.
    Engine events (``done.invoke.*``, ``xstate.*`` ...) never match a wildcard: a chart's
    catch-all must not swallow a service result or a timer.
    """
    if event_type.startswith(ENGINE_EVENT_PREFIXES):
        return False
    if descriptor == "*":
        return True
    prefix = descriptor[:-2]
    return event_type == prefix or event_type.startswith(prefix + ".")
