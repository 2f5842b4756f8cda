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
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.celery.deadletter.canvas import CANVAS_KEY
from xsm_celery.celery.deadletter.spool import (
    DEFAULT_SPOOL_DIR,
    DeadLetterSpool,
    dead_letter_id,
    run_id,
)
from xsm_celery.celery.task.secrets import mask_exception, task_secrets
from xsm_celery.engine import Machine, redact
from xsm_celery.engine.redact import DEFAULT_REDACT_KEYS, secret_values
from xsm_celery.errors import DeferredTooLongError, TimeLimitKilled, WorkerLost
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns import ERRORS_CONTEXT_KEY, DeadLetter, DeadLetterReason
from xsm_celery.patterns.dead_letter.redaction import mask_errors

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
    #: The chain, callbacks and chord the task was part of (``canvas.canvas_of``).
    canvas: Mapping[str, Any] = field(default_factory=dict)
    #: ``{workflow, key}`` when a workflow dispatched the task as a step (else None).
    workflow: Mapping[str, str] | None = None

    @classmethod
    def of_task(
        cls,
        task: Any,
        machine: Machine,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        **run: Any,
    ) -> TaskFailure:
        """The failure of ``task``'s current request on ``machine``; ``run`` gives the rest
        (``state_id``, ``event_type``, ``snapshot``, ``error``, ``retryable``, ...)."""
        return cls(
            task_name=str(task.name),
            task_id=str(task.request.id),
            args=list(args),
            kwargs=dict(kwargs),
            hostname=task.request.hostname,
            machine_id=str(machine.id),
            machine_hash=str(machine.structure_hash),
            machine_version=machine.version,
            **run,
        )


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
        spool: Where records wait while the store is down (``DEFAULT_SPOOL_DIR``).
    """

    def __init__(
        self,
        open_store: Callable[[], Any],
        signature: inspect.Signature | None,
        redact_keys: Iterable[str] | None,
        wall: Callable[[], float] = time.time,
        spool: DeadLetterSpool | None = None,
    ) -> None:
        self._open_store = open_store
        self._spool = spool if spool is not None else DeadLetterSpool(DEFAULT_SPOOL_DIR)
        self._signature = signature
        self._keys = None if redact_keys is None else tuple(redact_keys)
        self._wall = wall

    def build(self, failure: TaskFailure) -> DeadLetter:
        """The record for ``failure``; the chain moves out of the snapshot into ``errors``."""
        snapshot = json.loads(json.dumps(dict(failure.snapshot), default=str))
        context = snapshot.get("context") if isinstance(snapshot.get("context"), dict) else {}
        chain = context.pop(ERRORS_CONTEXT_KEY, None)
        args, kwargs = redact_arguments(self._signature, failure.args, failure.kwargs, self._keys)
        keys = self._keys or DEFAULT_REDACT_KEYS
        secrets = (*self.secrets(failure.args, failure.kwargs), *secret_values(snapshot, keys))
        errors = [dict(e) for e in chain] if isinstance(chain, list) else []
        attempts = _attempts(context)
        return DeadLetter(
            id=dead_letter_id(run_id(failure.task_id, failure.workflow), attempts),
            machine_id=failure.machine_id,
            state_id=failure.state_id,
            event={
                "type": failure.event_type,
                "payload": {**(failure.workflow or {}), **_canvas_payload(failure, self._keys)},
            },
            attempts=attempts,
            errors=mask_errors(errors, secrets),
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

    def secrets(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, ...]:
        """The values of this call's redacted arguments, to mask wherever text carries them."""
        return task_secrets(self._signature, args, kwargs, self._keys)

    def write(self, failure: TaskFailure) -> DeadLetter:
        """Build the record, keep it in the spool, then write it to the store.

        The task still ends in ``FAILURE`` when the store is down: the record waits in the
        spool (on local disk, never only in a log) and is written by the next give-up that
        reaches the store, or by ``xsm-celery dlq flush-spool``.
        """
        record = self.build(failure)
        mask_exception(failure.error, self.secrets(failure.args, failure.kwargs))
        self._spool.keep(record)
        try:
            store = self._open_store()
            self._spool.write_through(store, record)
        except Exception:
            logger.warning(
                "dead-letter store failed; the dead letter %s of task %s[%s] is kept in the "
                "spool %s and written when the store is back",
                record.id,
                failure.task_name,
                failure.task_id,
                self._spool.directory,
                exc_info=True,
            )
            emit(
                FactKind.DEAD_LETTER_WRITTEN,
                source="task",
                reason=record.reason,
                task=failure.task_name,
                task_id=failure.task_id,
                stored=False,
            )
            emit(FactKind.DEAD_LETTER_SPOOLED, task=failure.task_name, reason=record.reason)
            return record
        emit(
            FactKind.DEAD_LETTER_WRITTEN,
            source="task",
            reason=record.reason,
            task=failure.task_name,
            task_id=failure.task_id,
            stored=True,
        )
        self._spool.flush(store)
        return record

    def resume(self, task_id: str, attempts: int) -> str | None:
        """The id of the dead letter a killed run of ``task_id`` wrote at ``attempts``, if any.

        A worker killed during the write leaves the record in the spool (it is written now,
        with the real error chain) or a tombstone saying it was written; either way the
        redelivered message must not run the chart again, which would record ``WorkerLost``
        in place of the real error. Only the local spool is read, so a lost attempt that did
        not give up costs no store connection.
        """
        record_id = dead_letter_id(task_id, attempts)
        if self._spool.written(record_id):
            return record_id
        spooled = self._spool.get(record_id)
        if spooled is None:
            return None
        try:
            self._spool.write_through(self._open_store(), spooled)
        except Exception:
            logger.warning(
                "dead-letter store failed; dead letter %s stays in the spool %s",
                record_id,
                self._spool.directory,
                exc_info=True,
            )
        return record_id


def _canvas_payload(failure: TaskFailure, keys: Iterable[str] | None) -> dict[str, Any]:
    """The task's canvas, redacted by key like its arguments, under ``CANVAS_KEY``."""
    if not failure.canvas:
        return {}
    plain = json.loads(json.dumps(dict(failure.canvas), default=str))
    return {CANVAS_KEY: _redact(plain, keys)}


def _attempts(context: Mapping[str, Any]) -> int | None:
    value = context.get("attempt")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _reason(failure: TaskFailure) -> DeadLetterReason:
    if isinstance(failure.error, TimeLimitKilled):
        return DeadLetterReason.TIME_LIMIT
    if isinstance(failure.error, WorkerLost):
        return DeadLetterReason.WORKER_LOST
    if isinstance(failure.error, DeferredTooLongError):
        return DeadLetterReason.DEFERRED_TOO_LONG
    if not failure.retryable:
        return DeadLetterReason.NON_RETRYABLE
    return DeadLetterReason.TASK_EXHAUSTED
