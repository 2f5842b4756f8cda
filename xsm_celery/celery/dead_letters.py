"""The dead letter of a chart task: built from the run that gave up, written to the store.

The record carries what an operator needs to triage and replay a task: its name and id, the
arguments (redacted by parameter name, so ``charge(order_id, card_token)`` masks the token
even when it was passed positionally), the attempts, the error chain oldest first, the
redacted chart snapshot with its structure hash, and the worker's hostname.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xsm_celery.engine import redact
from xsm_celery.errors import WorkerLost
from xsm_celery.patterns import ERRORS_CONTEXT_KEY, DeadLetter, DeadLetterReason

__all__ = ["DeadLetterWriter", "TaskFailure", "redact_arguments"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskFailure:
    """What the run that gave up knows: the task, its call, the chart and the last error."""

    task_name: str
    task_id: str
    args: Sequence[Any]
    kwargs: Mapping[str, Any]
    hostname: str | None
    machine_id: str
    machine_hash: str
    machine_version: str | None
    state_id: str
    event_type: str
    snapshot: Mapping[str, Any]
    error: BaseException | None
    retryable: bool
    #: ``{workflow, key}`` when a workflow dispatched the task as a step (else None).
    workflow: Mapping[str, str] | None = None


def redact_arguments(
    signature: inspect.Signature | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    keys: Iterable[str] | None,
) -> tuple[list[Any], dict[str, Any]]:
    """Mask secret-looking arguments, naming positional ones by the function's parameters."""
    names: list[str] = []
    if signature is not None:
        names = [
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    named = {names[i]: value for i, value in enumerate(args) if i < len(names)}
    masked_named = _redact(named, keys)
    masked_args = [
        masked_named[names[i]] if i < len(names) else _redact(value, keys)
        for i, value in enumerate(args)
    ]
    return masked_args, _redact(dict(kwargs), keys)


def _redact(value: Any, keys: Iterable[str] | None) -> Any:
    return redact(value) if keys is None else redact(value, tuple(keys))


class DeadLetterWriter:
    """Build a task's ``DeadLetter`` and hand it to the store.

    Args:
        open_store: Returns the store; called at the first dead letter, so a worker that
            never gives up never connects to it.
        signature: The task function's signature, to name positional arguments.
        redact_keys: The key denylist (the engine's default plus the app's extra keys).
        wall: Epoch-seconds clock for ``taken_at``.
    """

    def __init__(
        self,
        open_store: Callable[[], Any],
        signature: inspect.Signature | None,
        redact_keys: Iterable[str] | None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._open_store = open_store
        self._signature = signature
        self._keys = None if redact_keys is None else tuple(redact_keys)
        self._wall = wall

    def build(self, failure: TaskFailure) -> DeadLetter:
        """The record for ``failure``; the chain moves out of the snapshot into ``errors``."""
        snapshot = json.loads(json.dumps(dict(failure.snapshot), default=str))
        context = snapshot.get("context") if isinstance(snapshot.get("context"), dict) else {}
        chain = context.pop(ERRORS_CONTEXT_KEY, None)
        args, kwargs = redact_arguments(self._signature, failure.args, failure.kwargs, self._keys)
        return DeadLetter(
            machine_id=failure.machine_id,
            state_id=failure.state_id,
            event={"type": failure.event_type, "payload": dict(failure.workflow or {})},
            attempts=_attempts(context),
            errors=[dict(e) for e in chain] if isinstance(chain, list) else [],
            snapshot=_redact(snapshot, self._keys),
            taken_at=self._wall(),
            reason=_reason(failure).value,
            machine_hash=failure.machine_hash,
            machine_version=failure.machine_version,
            task_name=failure.task_name,
            task_id=failure.task_id,
            task_args=args,
            task_kwargs=kwargs,
            hostname=failure.hostname,
        )

    def write(self, failure: TaskFailure) -> DeadLetter:
        """Build and store the record; if the store fails, log the whole record instead.

        The task still ends in ``FAILURE`` either way: a store outage must not turn a
        dead letter into an endless loop, and the logged JSON can be put back by hand.
        """
        record = self.build(failure)
        try:
            self._open_store().put(record)
        except Exception:
            logger.exception(
                "dead-letter store failed; task %s[%s] record kept only in this log: %s",
                failure.task_name,
                failure.task_id,
                record.to_json(),
            )
        return record


def _attempts(context: Mapping[str, Any]) -> int | None:
    value = context.get("attempt")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _reason(failure: TaskFailure) -> DeadLetterReason:
    if isinstance(failure.error, WorkerLost):
        return DeadLetterReason.WORKER_LOST
    if not failure.retryable:
        return DeadLetterReason.NON_RETRYABLE
    return DeadLetterReason.TASK_EXHAUSTED
