"""``DeadLetterPlugin``: write one ``DeadLetter`` when a machine enters a dead-letter state.

"Dead-lettered" is a state the chart reaches (after its retry loop gives up), so the chart,
not the engine, says where it is: any state tagged ``dead-letter``, or the ids given as
``state_ids``. The plugin collects the error chain as failures happen, notes dead-letter
states as they are entered, and writes the record from ``on_event_processed``, once the
step has settled, so the snapshot it carries is a legal resting configuration.

The chain lives in the machine's context under ``ERRORS_CONTEXT_KEY``, never in the
plugin: in production every attempt may run in a fresh interpreter (create, act, persist,
discard), and a single plugin object is shared by many machines on many threads. Context
is per machine instance, so neither a discarded interpreter nor a neighbour can lose or
mix up the chain.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from xsm_celery.checks import positive_int
from xsm_celery.engine import DEFAULT_REDACT_KEYS, InterpreterView, PluginBase, redact
from xsm_celery.errors import ArgumentTypeError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.dead_letter.record import DeadLetter, DeadLetterReason
from xsm_celery.patterns.error_chain import ERRORS_CONTEXT_KEY, error_entry

__all__ = ["DEAD_LETTER_TAG", "DeadLetterPlugin"]

logger = logging.getLogger(__name__)

#: The tag that marks a dead-letter state in a chart.
DEAD_LETTER_TAG = "dead-letter"

#: Error-chain entries kept by default (the newest win).
DEFAULT_MAX_ERRORS = 20


def _sink_callable(sink: object) -> Callable[[DeadLetter], object]:
    """The function to hand records to; refused now rather than at the first dead letter."""
    if callable(sink):
        return sink
    put = getattr(sink, "put", None)
    if callable(put):
        return put  # type: ignore[no-any-return]
    raise ArgumentTypeError(
        f"DeadLetterPlugin sink must be callable(DeadLetter) or have a put() method, "
        f"got {type(sink).__name__}; pass a DeadLetterStore or a function"
    )


class DeadLetterPlugin(PluginBase):
    """Capture a redacted ``DeadLetter`` each time a dead-letter state is entered.

    Args:
        sink: ``callable(DeadLetter)`` or an object with ``put(DeadLetter)`` (any store).
        state_ids: Full ids of the dead-letter states; by default, states tagged
            ``dead-letter``.
        include_snapshot: Put the redacted snapshot in the record (needed to replay).
        attempt_key: The context key of the attempt counter, copied to ``attempts``.
        max_errors: Chain entries kept, newest first to go when over.
        redact_keys: Key denylist for redaction (the engine's default list by default).
        report: Emit ``DEAD_LETTER_WRITTEN`` once the sink took the record; False when the
            sink only buffers it and whoever stores it reports it (a workflow step, which
            stores its dead letters after its commit).

    A sink that raises is logged at ERROR with the record id and re-raised, so the
    engine's ``on_plugin_error`` sees it; the machine itself carries on.
    """

    def __init__(
        self,
        sink: object,
        state_ids: Iterable[str] | None = None,
        *,
        include_snapshot: bool = True,
        attempt_key: str = "attempt",
        max_errors: int = DEFAULT_MAX_ERRORS,
        redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS,
        report: bool = True,
    ) -> None:
        positive_int("max_errors", max_errors)
        if isinstance(state_ids, str):
            raise ArgumentTypeError(
                f"state_ids takes a list of state ids, got the string {state_ids!r}"
            )
        self.sink = sink
        self._put = _sink_callable(sink)
        self.state_ids = frozenset(state_ids or ())
        self.include_snapshot = include_snapshot
        self.attempt_key = attempt_key
        self.max_errors = max_errors
        self.redact_keys = tuple(redact_keys)
        self.report = bool(report)
        self._lock = threading.Lock()
        self._entered: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()

    def on_service_error(
        self, interpreter: InterpreterView, invocation: Any, error: BaseException
    ) -> None:
        """Add a failed service to the chain."""
        name = getattr(invocation, "src", None) or getattr(invocation, "id", None) or "?"
        self._push(interpreter, "service", str(name), error)

    def on_action_error(
        self, interpreter: InterpreterView, action: Any, error: BaseException
    ) -> None:
        """Add a failed action to the chain."""
        self._push(interpreter, "action", str(getattr(action, "type", action)), error)

    def on_service_done(self, interpreter: InterpreterView, invocation: Any, result: Any) -> None:
        """A clean finish ends the chain; the next failure starts a fresh one."""
        _context(interpreter).pop(ERRORS_CONTEXT_KEY, None)

    def on_transition(
        self, interpreter: InterpreterView, from_states: Any, to_states: Any, transition: Any
    ) -> None:
        """Note the dead-letter states this transition entered; the record comes later."""
        if not from_states:
            return
        entered = [
            node.id for node in to_states if node not in from_states and self._is_dead_letter(node)
        ]
        if entered:
            with self._lock:
                self._entered.setdefault(interpreter, []).extend(entered)

    def on_event_processed(self, interpreter: InterpreterView, event: Any, receipt: Any) -> None:
        """Write one record per dead-letter state entered while handling ``event``."""
        with self._lock:
            entered = self._entered.pop(interpreter, None)
        for state_id in entered or ():
            self._emit(self._capture(interpreter, event, state_id))

    def on_interpreter_start(self, interpreter: InterpreterView) -> None:
        """Start-up is not an event step: an initial dead-letter state writes nothing."""
        with self._lock:
            self._entered.pop(interpreter, None)

    def on_interpreter_stop(self, interpreter: InterpreterView) -> None:
        """Forget notes of a stopped interpreter; its chain stays in its context."""
        with self._lock:
            self._entered.pop(interpreter, None)

    def _is_dead_letter(self, node: Any) -> bool:
        if self.state_ids:
            return node.id in self.state_ids
        return DEAD_LETTER_TAG in (getattr(node, "tags", None) or ())

    def _push(
        self, interpreter: InterpreterView, source: str, name: str, error: BaseException
    ) -> None:
        ctx = _context(interpreter)
        entry = error_entry(source, name, error, context=ctx, redact_keys=self.redact_keys)
        chain = ctx.get(ERRORS_CONTEXT_KEY)
        chain = list(chain) if isinstance(chain, list) else []
        chain.append(entry)
        ctx[ERRORS_CONTEXT_KEY] = chain[-self.max_errors :]

    def _capture(self, interpreter: InterpreterView, event: Any, state_id: str) -> DeadLetter:
        """Build the record, then clear the chain so a later episode starts fresh."""
        ctx = _context(interpreter)
        chain = ctx.get(ERRORS_CONTEXT_KEY)
        errors = [dict(e) for e in chain] if isinstance(chain, list) else []
        machine = interpreter.machine
        record = DeadLetter(
            machine_id=str(interpreter.id),
            state_id=state_id,
            event=self._event_dict(event),
            attempts=_attempts(ctx, self.attempt_key),
            errors=errors,
            snapshot=self._snapshot(interpreter) if self.include_snapshot else {},
            taken_at=float(interpreter.wall_now()),
            reason=self._reason(ctx),
            machine_hash=getattr(machine, "structure_hash", None),
            machine_version=_optional_str(getattr(machine, "version", None)),
        )
        ctx.pop(ERRORS_CONTEXT_KEY, None)
        return record

    def _reason(self, ctx: dict[str, Any]) -> str:
        """``non_retryable`` when a ``RetryPolicy`` gave up on the error's type."""
        if ctx.get(f"_xsm_{self.attempt_key}_give_up"):
            return DeadLetterReason.NON_RETRYABLE.value
        return DeadLetterReason.DEAD_LETTER_STATE.value

    def _event_dict(self, event: Any) -> dict[str, Any]:
        payload = getattr(event, "payload", None)
        payload = dict(payload) if isinstance(payload, dict) else {}
        return {
            "type": str(getattr(event, "type", event)),
            "payload": redact(payload, self.redact_keys),
        }

    def _snapshot(self, interpreter: InterpreterView) -> dict[str, Any]:
        """The redacted snapshot, without the chain (the record carries it as ``errors``)."""
        snapshot = json.loads(interpreter.get_snapshot())
        context = snapshot.get("context")
        if isinstance(context, dict):
            context.pop(ERRORS_CONTEXT_KEY, None)
        redacted: dict[str, Any] = redact(snapshot, self.redact_keys)
        return redacted

    def _emit(self, record: DeadLetter) -> None:
        try:
            self._put(record)
            if self.report:
                emit(
                    FactKind.DEAD_LETTER_WRITTEN,
                    source="plugin",
                    reason=record.reason,
                    machine=record.machine_id,
                    stored=True,
                )
        except Exception:
            logger.error(
                "dead-letter sink %r failed; record %s (%s @ %s) was not stored",
                self.sink,
                record.id,
                record.machine_id,
                record.state_id,
            )
            raise


def _context(interpreter: Any) -> dict[str, Any]:
    ctx: dict[str, Any] = interpreter.context
    return ctx


def _attempts(ctx: dict[str, Any], key: str) -> int | None:
    value = ctx.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return int(value)
    except (ValueError, OverflowError):
        return None


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)
