"""One delivery's way through the dispatcher, as a sequence of small decisions.

``Handling.run()`` returns the envelope id and an ``Outcome``; it never raises for anything
an envelope, a user hook or a store does. The order of the checks is the contract:
decode and validate (corrupt), route (unknown), deduplicate, the attempt budget, then the
step. Only failures of the step and of user hooks count as attempts; an outage of a store
or an inbox (``StoreUnavailableError``, a lock timeout, an optimistic conflict) is the
infrastructure's fault, so it is requeued without being counted. Any other ``StoreError`` is
a store refusing what the envelope carries, which no redelivery changes: it is counted and
dead-lettered (``store_refused``) at once.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from xsm_celery.eda.dead_letter import redact_record
from xsm_celery.eda.envelope import Envelope, EnvelopeCorruptError, EnvelopeTooLargeError
from xsm_celery.eda.outbox import attach_cause
from xsm_celery.engine import Event, Machine, Receipt
from xsm_celery.engine.redact import mask_text, secret_values
from xsm_celery.engine.state import DONE
from xsm_celery.errors import (
    ConflictError,
    LockTimeoutError,
    StoreError,
    StoreUnavailableError,
    XsmError,
)
from xsm_celery.hooks import FactKind, emit, wants
from xsm_celery.patterns.dead_letter import DeadLetter, DeadLetterReason
from xsm_celery.patterns.error_chain import error_entry
from xsm_celery.persistence.idempotency import AdmissionKind
from xsm_celery.persistence.inbox import fingerprint
from xsm_celery.persistence.persisted import persisted

if TYPE_CHECKING:
    from xsm_celery.engine.clock import Clock
    from xsm_celery.persistence.idempotency import IdempotencyPlugin
    from xsm_celery.persistence.protocols import LockStrategy, StateStore

__all__ = ["DispatcherView", "Handling", "Outcome", "StepFailedError"]

logger = logging.getLogger("xsm_celery.eda")

_RAW_KEEP = 4096
#: The narrowest store column a record's machine id goes to (Django's is 200 characters).
_MACHINE_ID_KEEP = 200


#: Store errors that say "try again later": the store is down, locked, or another writer
#: won a race. Any other ``StoreError`` is the store refusing what it was given.
_OUTAGES = (StoreUnavailableError, LockTimeoutError, ConflictError)


class Outcome(enum.Enum):
    """What happened to one delivery, and how it is settled."""

    PROCESSED = "processed"
    DUPLICATE = "duplicate"
    DEAD_LETTERED = "dead_lettered"
    IGNORED = "ignored"
    #: The step or a user hook failed: requeued, and counted against ``max_attempts``.
    RETRY = "retry"
    #: A store was down, or the envelope waits behind its subject: requeued, not counted.
    REQUEUE = "requeue"

    @property
    def label(self) -> str:
        """The name ``DispatchResult.outcomes`` uses (both requeues are ``retried``)."""
        return "retried" if self.requeue else str(self.value)

    @property
    def requeue(self) -> bool:
        """Whether the delivery goes back to the broker (nack with requeue) or is acked."""
        return self in (Outcome.RETRY, Outcome.REQUEUE)


class StepFailedError(XsmError):
    """The machine's step recorded an error; nothing was saved."""


class _InstanceDoneError(XsmError):
    """The instance is in a final state and takes no more events."""


class DispatcherView(Protocol):
    """What one delivery's handling reads from the dispatcher that runs it.

    ``InboundDispatcher`` provides it. It is declared here, by shape, because the dispatcher
    creates a ``Handling`` per delivery and so imports this module.
    """

    @property
    def store(self) -> StateStore:
        """Where the instances live."""

    @property
    def lock(self) -> LockStrategy:
        """How concurrent writers of one instance are kept apart."""

    @property
    def clock(self) -> Clock | None:
        """The instances' clock."""

    @property
    def plugins(self) -> tuple[Any, ...]:
        """Plugins attached to every instance."""

    @property
    def idempotency(self) -> IdempotencyPlugin | None:
        """Deduplication on the inbox, when there is one."""

    @property
    def max_attempts(self) -> int:
        """Failed deliveries before an envelope is dead-lettered."""

    @property
    def on_unknown(self) -> str:
        """``"dead_letter"`` or ``"ignore"`` for a type no machine handles."""

    @property
    def dead_letters(self) -> Any:
        """The dead-letter store or sink."""

    @property
    def event_type(self) -> Callable[[Envelope], str]:
        """The chart event an envelope becomes."""

    @property
    def key_for(self) -> Callable[[Envelope, Machine], str]:
        """The instance key of an envelope."""

    @property
    def dedup_key(self) -> Callable[[Envelope], str]:
        """The inbox key of an envelope."""

    def machine_for(self, envelope_type: str) -> Machine | None:
        """The machine for a CloudEvents type, or None."""

    def attempts_of(self, envelope: Envelope) -> int:
        """Deliveries of this envelope so far, as far as the dispatcher knows."""

    def count_failure(self, envelope: Envelope) -> int:
        """Count one failed attempt; return the attempts so far."""

    def forget(self, envelope_id: str) -> None:
        """Drop what the dispatcher remembers of a settled envelope."""


def _decode(raw: Any) -> Envelope:
    if isinstance(raw, Envelope):
        return raw
    if isinstance(raw, str | bytes | bytearray):
        return Envelope.from_json(raw)
    return Envelope.from_dict(raw)


def _raw_view(raw: Any) -> dict[str, Any]:
    """What a corrupt record keeps of an undecodable envelope: a bounded, flat excerpt."""
    if isinstance(raw, Envelope):
        return raw.to_dict()
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw[:_RAW_KEEP]).decode("utf-8", "replace")
    return {"raw": str(raw)[:_RAW_KEEP] if not isinstance(raw, str) else raw[:_RAW_KEEP]}


class Handling:
    """The processing of one delivery by one dispatcher."""

    def __init__(self, dispatcher: DispatcherView, raw: Any, topic: str | None) -> None:
        self.d = dispatcher
        self.raw = raw
        self.topic = topic
        self.env: Envelope | None = None
        self.event: Event | None = None
        self.machine: Machine | None = None
        self.key = ""
        self.claim: tuple[str, str] | None = None

    @property
    def env_id(self) -> str:
        """The envelope id, or ``""`` for an undecodable one."""
        return self.env.id if self.env is not None else ""

    def run(self) -> tuple[str, Outcome]:
        """Decide and carry out this delivery; return its id and outcome."""
        started = time.perf_counter()
        try:
            outcome = self._route()
        except _OUTAGES as exc:
            self._release()
            logger.warning("envelope %s requeued: store unavailable: %s", self.env_id, exc)
            outcome = Outcome.REQUEUE
        except StoreError as exc:
            self._release()
            outcome = self._refused(exc)
        except Exception as exc:
            self._release()
            outcome = self._failed(exc)
        if wants(FactKind.DISPATCH_OUTCOME):
            self._report(outcome, time.perf_counter() - started)
        return self.env_id, outcome

    def _report(self, outcome: Outcome, duration_s: float) -> None:
        """One ``DISPATCH_OUTCOME`` fact: bounded fields, the envelope's trace context."""
        env, machine = self.env, self.machine
        parent = env.extensions.get("traceparent") if env is not None else None
        emit(
            FactKind.DISPATCH_OUTCOME,
            outcome=outcome.label,
            counted=outcome is Outcome.RETRY,
            topic=self.topic,
            machine=machine.id if machine is not None else None,
            envelope_id=self.env_id,
            traceparent=parent,
            duration_s=duration_s,
        )

    def _route(self) -> Outcome:
        try:
            env = self.env = _decode(self.raw)
            if not env.subject:
                raise EnvelopeCorruptError(
                    "envelope has no subject; the subject names the machine instance"
                )
        except (EnvelopeCorruptError, EnvelopeTooLargeError) as exc:
            return self._dead_letter(DeadLetterReason.CORRUPT.value, exc, corrupt=True)
        self.machine = self.d.machine_for(env.type)
        if self.machine is None:
            return self._unknown()
        try:
            self.event = env.to_event(self.d.event_type(env))
        except (EnvelopeCorruptError, EnvelopeTooLargeError) as exc:
            return self._dead_letter(DeadLetterReason.CORRUPT.value, exc, corrupt=True)
        self.key = self.d.key_for(env, self.machine)
        early = self._admit()
        if early is not None:
            return early
        if self.d.attempts_of(env) >= self.d.max_attempts:
            self._release()
            note = StepFailedError(f"delivered {env.attempt} times already; never completed")
            return self._dead_letter(DeadLetterReason.MAX_ATTEMPTS.value, note)
        return self._step()

    def _unknown(self) -> Outcome:
        if self.d.on_unknown == "ignore":
            return Outcome.IGNORED
        assert self.env is not None
        note = LookupError(f"no machine handles envelope type {self.env.type!r}")
        return self._dead_letter(DeadLetterReason.UNKNOWN_EVENT.value, note)

    def _admit(self) -> Outcome | None:
        idem, env, event = self.d.idempotency, self.env, self.event
        if idem is None or env is None or event is None:
            return None
        scope = idem.scope_for(env.source, self.key)
        dedup = self.d.dedup_key(env)
        admission = idem.admit(scope, dedup, fingerprint(event.type, event.payload))
        if admission.kind is AdmissionKind.NEW:
            self.claim = (scope, dedup)
            return None
        if admission.kind is AdmissionKind.DUPLICATE:
            self.d.forget(env.id)
            return Outcome.DUPLICATE
        if admission.kind is AdmissionKind.IN_FLIGHT:
            logger.info("envelope %s is in flight elsewhere; requeued", env.id)
            return Outcome.REQUEUE
        note = ValueError(f"envelope id {dedup!r} was first seen with another event or payload")
        reason = DeadLetterReason.IDEMPOTENCY_MISMATCH.value
        return self._dead_letter(reason, note)

    def _step(self) -> Outcome:
        assert self.env is not None
        assert self.event is not None
        assert self.machine is not None
        env, event = self.env, self.event
        receipt: list[Receipt] = []
        idem = self.d.idempotency
        in_transaction = idem is not None and idem.shares_transaction(self.d.store)
        with persisted(
            self.d.store,
            self.key,
            self.machine,
            lock=self.d.lock,
            clock=self.d.clock,
            plugins=self.d.plugins,
            before_commit=[lambda interp: self._mark(receipt)] if in_transaction else (),
        ) as interp:
            if interp.status == DONE:
                raise _InstanceDoneError(f"instance {self.key!r} already reached a final state")
            attach_cause(interp, env)
            outcome = interp.send(event, wait=True)
            if outcome.error is not None:
                raise StepFailedError(str(outcome.error)) from outcome.error
            receipt.append(outcome)
        if not in_transaction:
            self._mark(receipt)
        self.claim = None
        self.d.forget(env.id)
        return Outcome.PROCESSED

    def _mark(self, receipt: list[Receipt]) -> None:
        """Record the receipt; the claim is kept until the save is known to have committed."""
        if self.claim is not None and self.d.idempotency is not None and receipt:
            self.d.idempotency.complete(*self.claim, receipt[0])

    def _release(self) -> None:
        if self.claim is not None and self.d.idempotency is not None:
            claim, self.claim = self.claim, None
            try:
                self.d.idempotency.abandon(*claim)
            except Exception:
                logger.exception("could not release inbox claim %s", claim)

    def _failed(self, exc: Exception) -> Outcome:
        if self.env is None:
            logger.exception("dispatcher failed before the envelope was decoded")
            return Outcome.REQUEUE
        if isinstance(exc, _InstanceDoneError):
            return self._dead_letter(DeadLetterReason.INSTANCE_DONE.value, exc)
        attempts = self.d.count_failure(self.env)
        if attempts >= self.d.max_attempts:
            return self._dead_letter(DeadLetterReason.MAX_ATTEMPTS.value, exc, attempts=attempts)
        logger.warning(
            "envelope %s failed (attempt %d of %d), requeued: %s",
            self.env.id,
            attempts,
            self.d.max_attempts,
            self._masked(exc),
        )
        return Outcome.RETRY

    def _masked(self, exc: BaseException) -> str:
        """The error's message for a log line, with the envelope's secret values masked."""
        data = self.env.data if self.env is not None else None
        return mask_text(str(exc), secret_values(data))

    def _refused(self, exc: StoreError) -> Outcome:
        """A store refused what this envelope carries: it would be refused again, so give up.

        It counts as an attempt, and is dead-lettered at once: a value too long for a column
        or a context over the snapshot cap does not shrink on a redelivery.
        """
        if self.env is None:
            logger.exception("dispatcher failed before the envelope was decoded")
            return Outcome.REQUEUE
        attempts = self.d.count_failure(self.env)
        emit(FactKind.STORE_REFUSED, source="dispatcher", error_type=type(exc).__name__)
        return self._dead_letter(DeadLetterReason.STORE_REFUSED.value, exc, attempts=attempts)

    def _record(self, reason: str, exc: BaseException, attempts: int | None) -> DeadLetter:
        env, machine = self.env, self.machine
        envelope = env.to_dict() if env is not None else _raw_view(self.raw)
        machine_id = machine.id if machine is not None else _machine_id_of(env)
        event = self.event.to_dict() if self.event is not None else {"type": "", "payload": {}}
        version = machine.version if machine is not None else None
        record = DeadLetter(
            machine_id=machine_id,
            state_id="",
            event=event,
            attempts=attempts,
            errors=[error_entry("dispatcher", type(exc).__name__, exc)],
            snapshot={},
            taken_at=time.time(),
            reason=reason,
            envelope=envelope,
            topic=self.topic,
            machine_hash=machine.structure_hash if machine is not None else None,
            machine_version=None if version is None else str(version),
        )
        return redact_record(record)

    def _dead_letter(
        self, reason: str, exc: BaseException, *, attempts: int | None = None, corrupt: bool = False
    ) -> Outcome:
        try:
            record = self._record(reason, exc, attempts)
            sink = self.d.dead_letters
            put = getattr(sink, "put", None)
            (put or sink)(record)
        except Exception:
            logger.exception("could not dead-letter envelope %s; requeued", self.env_id)
            return Outcome.REQUEUE
        if self.env is not None:
            self.d.forget(self.env.id)
        level = logging.WARNING if corrupt else logging.ERROR
        emit(
            FactKind.DEAD_LETTER_WRITTEN,
            source="dispatcher",
            reason=reason,
            topic=self.topic,
            machine=self.machine.id if self.machine is not None else None,
            envelope_id=self.env_id,
            stored=True,
        )
        logger.log(
            level, "envelope %s dead-lettered (%s): %s", self.env_id, reason, self._masked(exc)
        )
        return Outcome.DEAD_LETTERED


def _machine_id_of(env: Envelope | None) -> str:
    """Best guess of the addressed machine for a record with no machine: ``xsm.<id>.*``."""
    if env is None:
        return "unknown"
    parts = env.type.split(".")
    found = parts[1] if len(parts) >= 3 and parts[0] == "xsm" and parts[1] else env.type
    return found[:_MACHINE_ID_KEEP]
