"""What a chart publishes, declared in the chart, and the plugin that publishes it.

A transition publishes with ``"meta": {"publish": ...}``: ``{"type": "order.paid", "data":
["total"]}`` copies those context fields, ``"order.paid"`` publishes the type alone, ``true``
publishes ``xsm.<machine>.transition.<target>``. A state tagged ``publish`` publishes
``xsm.<machine>.transition.<state>`` with the whole public context, redacted, on entry.

``OutboxPlugin`` builds the envelopes during the step (``causationid`` and
``correlationid`` come from the inbound envelope the dispatcher attached) and hands them to
its sink once it is safe: an outbox store writes them in the snapshot's transaction; a
broker publishes them after the save committed.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import threading
import weakref
from collections.abc import Awaitable, Iterator
from typing import Any, NamedTuple

from xsm_celery.eda.envelope import Envelope
from xsm_celery.engine import InterpreterView, Machine, PluginBase, public_context, redact
from xsm_celery.engine.awaiting import finish
from xsm_celery.engine.chart import StateNode, Transition
from xsm_celery.errors import ArgumentTypeError, ConfigurationError
from xsm_celery.persistence.persisted import is_persisted

__all__ = [
    "PUBLISH_TAG",
    "OutboxPlugin",
    "PublishSpec",
    "attach_cause",
    "cause_of",
    "collect_publishes",
    "consumed_events",
    "publish_specs",
]

logger = logging.getLogger("xsm_celery.eda")

#: The state tag that makes ``OutboxPlugin`` publish on entry.
PUBLISH_TAG = "publish"

_causes: weakref.WeakKeyDictionary[Any, Envelope] = weakref.WeakKeyDictionary()
_causes_lock = threading.Lock()
_awaiting: contextvars.ContextVar[list[Awaitable[Any]] | None] = contextvars.ContextVar(
    "xsm_outbox_awaiting", default=None
)


def attach_cause(interp: Any, envelope: Envelope | None) -> None:
    """Record the inbound envelope ``interp`` is handling, for the causation chain."""
    with _causes_lock:
        if envelope is None:
            _causes.pop(interp, None)
        else:
            _causes[interp] = envelope


def cause_of(interp: Any) -> Envelope | None:
    """Return the inbound envelope attached to ``interp``, if any."""
    with _causes_lock:
        return _causes.get(interp)


@contextlib.contextmanager
def collect_publishes() -> Iterator[list[Awaitable[Any]]]:
    """Gather async publishes started inside the block so the caller can await them."""
    items: list[Awaitable[Any]] = []
    token = _awaiting.set(items)
    try:
        yield items
    finally:
        _awaiting.reset(token)


class PublishSpec(NamedTuple):
    """One publication a chart declares.

    ``kind`` is ``"transition"`` or ``"state"``; ``source`` the state id declaring it;
    ``event`` the transition's event (``None`` for states and eventless transitions);
    ``fields`` the context fields copied, ``None`` for the whole (redacted) context, ``()``
    for no data.
    """

    kind: str
    source: str
    event: str | None
    type: str
    fields: tuple[str, ...] | None


def _relative(machine: Machine, node: StateNode) -> str:
    prefix = f"{machine.id}."
    return node.id[len(prefix) :] if node.id.startswith(prefix) else node.key


def _transition_type(machine: Machine, trans: Transition) -> str:
    target = trans.targets[0] if trans.targets else trans.source
    return f"xsm.{machine.id}.transition.{_relative(machine, target)}"


def _spec_of(machine: Machine, trans: Transition, value: Any) -> PublishSpec:
    where = f"{trans.path or trans.source.id}.meta.publish"
    event = trans.event or None
    if value is True:
        kind = _transition_type(machine, trans)
        return PublishSpec("transition", trans.source.id, event, kind, ())
    if isinstance(value, str) and value:
        return PublishSpec("transition", trans.source.id, event, value, ())
    if isinstance(value, dict) and isinstance(value.get("type"), str) and value["type"]:
        data = value.get("data", ())
        unknown = set(value) - {"type", "data"}
        if (
            not unknown
            and isinstance(data, list | tuple)
            and all(isinstance(f, str) and f for f in data)
        ):
            return PublishSpec("transition", trans.source.id, event, value["type"], tuple(data))
    raise ConfigurationError(
        f'{where}: {value!r:.120} is not a publication; use true, "<type>" or '
        '{"type": "<type>", "data": ["<context field>", ...]}'
    )


def _transitions(node: StateNode) -> Iterator[Transition]:
    for group in node.on.values():
        yield from group
    yield from node.always
    for after in node.after:
        yield from after.transitions
    for invocation in node.invoke:
        yield from invocation.on_done
        yield from invocation.on_error


def _build_specs(machine: Machine) -> tuple[PublishSpec, ...]:
    specs: list[PublishSpec] = []
    for node in machine.iter_states():
        for trans in _transitions(node):
            if "publish" in trans.meta and trans.meta["publish"] not in (None, False):
                specs.append(_spec_of(machine, trans, trans.meta["publish"]))
        if PUBLISH_TAG in node.tags and node.parent is not None:
            kind = f"xsm.{machine.id}.transition.{_relative(machine, node)}"
            specs.append(PublishSpec("state", node.id, None, kind, None))
    return tuple(specs)


def publish_specs(machine: Machine) -> list[PublishSpec]:
    """Return every publication ``machine`` declares; a malformed one raises ``ValueError``."""
    return list(_build_specs(machine))


def consumed_events(machine: Machine) -> list[str]:
    """Return every event a caller may send the chart (engine-only names left out), sorted."""
    from xsm_celery.engine import is_engine_event_type

    names = {
        name
        for node in machine.iter_states()
        for name in node.on
        if name and name != "*" and not is_engine_event_type(name)
    }
    return sorted(names)


def _copy_fields(context: dict[str, Any], fields: tuple[str, ...] | None) -> dict[str, Any]:
    if fields is None:
        clean: dict[str, Any] = redact(public_context(context))
        return clean
    return {name: context.get(name) for name in fields}


class _Batch:
    """The envelopes one interpreter produced and not yet handed over."""

    __slots__ = ("envelopes", "error")

    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []
        self.error: BaseException | None = None


class OutboxPlugin(PluginBase):
    """Publish what the chart declares, through an outbox store or straight to a broker.

    Args:
        sink: An ``OutboxStore`` (anything with ``add(topic, envelope)``), transactional
            when it shares the state store's transaction; or a broker adapter (anything
            with ``publish``), published after the save commits (at-most-once-ish).
        topic: The topic every envelope is published on.
        source: The CloudEvents ``source``; default ``xsm/<machine id>``.
    """

    def __init__(self, sink: Any, topic: str = "events", *, source: str | None = None) -> None:
        if callable(getattr(sink, "add", None)):
            self._to_store = True
        elif callable(getattr(sink, "publish", None)):
            self._to_store = False
        else:
            raise ArgumentTypeError(
                f"OutboxPlugin sink must be an OutboxStore (add) or a broker (publish), "
                f"got {type(sink).__name__}"
            )
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError(f"topic must be a non-empty string, got {topic!r}")
        self.sink = sink
        self.topic = topic
        self.source = source
        self._lock = threading.Lock()
        self._batches: weakref.WeakKeyDictionary[Any, _Batch] = weakref.WeakKeyDictionary()

    def _batch(self, interp: Any) -> _Batch:
        with self._lock:
            batch = self._batches.get(interp)
            if batch is None:
                batch = self._batches[interp] = _Batch()
            return batch

    def _envelope(self, interp: Any, kind: str, data: dict[str, Any]) -> Envelope:
        return Envelope.from_transition(
            interp, type=kind, data=data, cause=cause_of(interp), source=self.source
        )

    def on_transition(
        self,
        i: InterpreterView,
        from_states: set[StateNode],
        to_states: set[StateNode],
        transition: Transition,
    ) -> None:
        """Build the envelopes this transition and the states it entered declare."""
        try:
            built = self._build(i, to_states - from_states, transition)
        except Exception as exc:
            batch = self._batch(i)
            batch.error = batch.error or exc
            raise
        if built:
            self._batch(i).envelopes.extend(built)

    def _build(
        self, i: InterpreterView, entered: set[StateNode], transition: Transition
    ) -> list[Envelope]:
        built: list[Envelope] = []
        value = transition.meta.get("publish") if transition.meta else None
        if value not in (None, False):
            spec = _spec_of(i.machine, transition, value)
            built.append(self._envelope(i, spec.type, _copy_fields(i.context, spec.fields)))
        for node in sorted(entered, key=lambda n: n.order):
            if PUBLISH_TAG in node.tags and node.parent is not None:
                kind = f"xsm.{i.machine.id}.transition.{_relative(i.machine, node)}"
                built.append(self._envelope(i, kind, _copy_fields(i.context, None)))
        return built

    def on_event_processed(self, i: InterpreterView, event: Any, receipt: Any) -> None:
        """Outside ``persisted()`` there is no save to wait for: hand the envelopes over now."""
        if not is_persisted(i):
            self._flush(i)

    def on_interpreter_stop(self, i: InterpreterView) -> None:
        """Hand over what a stopped, unmanaged interpreter still holds."""
        if not is_persisted(i):
            self._flush(i)

    def on_before_save(self, i: InterpreterView) -> None:
        """Refuse the save when a publication of this step could not be built."""
        with self._lock:
            batch = self._batches.get(i)
        if batch is not None and batch.error is not None:
            raise batch.error

    def on_persist(self, i: InterpreterView, store: Any) -> None:
        """Write the envelopes in the save's transaction (outbox store sinks)."""
        if self._to_store:
            self._flush(i)

    def on_commit(self, i: InterpreterView) -> None:
        """Publish after the save committed (broker sinks)."""
        if not self._to_store:
            self._flush(i)

    def on_rollback(self, i: InterpreterView) -> None:
        """Nothing was saved: drop what the step built, so nothing is announced."""
        with self._lock:
            self._batches.pop(i, None)

    def pending(self, interp: Any) -> list[Envelope]:
        """Return the envelopes ``interp`` produced that were not handed over yet."""
        with self._lock:
            batch = self._batches.get(interp)
            return list(batch.envelopes) if batch else []

    def _flush(self, interp: Any) -> None:
        with self._lock:
            batch = self._batches.pop(interp, None)
        if batch is None or not batch.envelopes:
            return
        for env in batch.envelopes:
            if self._to_store:
                self.sink.add(self.topic, env)
            else:
                _settle(self.sink.publish(self.topic, env))


def _settle(result: Any) -> None:
    """Finish an async broker's publish: awaited by the dispatcher, scheduled, or run."""
    if not inspect.isawaitable(result):
        return
    pending = _awaiting.get()
    if pending is not None:
        pending.append(result)
        return
    finish(result, "outbox publish")
