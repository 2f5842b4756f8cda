"""Safe replay of an envelope dead letter through a dispatcher.

A replay is a dry run unless asked otherwise, needs a reason, and is audited whatever its
outcome. It reuses the envelope's id, so an inbox turns a double replay into a duplicate,
and it refuses a record captured from another version of the chart (structure hash or
version changed) unless forced: replaying an old event into a new chart can be wrong in
ways no test catches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xsm_celery.eda.envelope import Envelope
from xsm_celery.engine.redact import REDACTED
from xsm_celery.errors import EnvelopeError, ReplayRefusedError
from xsm_celery.hooks import FactKind, emit
from xsm_celery.operators import current_actor
from xsm_celery.patterns.dead_letter import DeadLetter

__all__ = ["ReplayResult", "replay_dead_letter"]


@dataclass
class ReplayResult:
    """What ``replay_dead_letter`` did.

    ``outcome`` is ``dry_run`` for a dry run, otherwise the dispatcher's outcome for the
    envelope (``processed``, ``duplicate``, ``retried``, ``dead_lettered``, ``ignored``).
    """

    record_id: str
    dry_run: bool
    outcome: str
    warnings: list[str] = field(default_factory=list)


def _mismatches(record: DeadLetter, machine: Any) -> list[str]:
    found: list[str] = []
    if record.machine_hash and record.machine_hash != machine.structure_hash:
        found.append(
            f"machine {machine.id!r} structure changed since capture "
            f"({record.machine_hash} -> {machine.structure_hash})"
        )
    current = None if machine.version is None else str(machine.version)
    captured = record.machine_hash is not None or record.machine_version is not None
    if captured and record.machine_version != current:
        found.append(
            f"machine {machine.id!r} version changed since capture "
            f"({record.machine_version} -> {current})"
        )
    return found


def _contains_mask(value: Any) -> bool:
    if value == REDACTED:
        return True
    if isinstance(value, dict):
        return any(_contains_mask(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_mask(v) for v in value)
    return False


def _envelope_of(record: DeadLetter) -> Envelope:
    if record.envelope is None:
        raise ReplayRefusedError(
            f"dead letter {record.id} was captured from a chart state, not an envelope; "
            "restore its snapshot instead (only envelope dead letters replay)"
        )
    try:
        return Envelope.from_dict(record.envelope).with_attempt(0)
    except EnvelopeError as exc:
        raise ReplayRefusedError(
            f"dead letter {record.id} holds an envelope that cannot be replayed ({exc}); "
            "fix the producer and let it send the event again"
        ) from exc


def _check(record: DeadLetter, dispatcher: Any, force: bool) -> tuple[Envelope, list[str]]:
    """Return the envelope to send and the warnings, or raise why it must not be sent."""
    env = _envelope_of(record)
    machine = dispatcher.machine_for(env.type)
    if machine is None:
        raise ReplayRefusedError(
            f"no machine handles type {env.type!r} in this dispatcher; pass the chart "
            f"{record.machine_id!r} (xsm dlq replay --machine)"
        )
    warnings = _mismatches(record, machine)
    if warnings and not force:
        raise ReplayRefusedError(
            f"refusing to replay {record.id}: {'; '.join(warnings)}; check the change is "
            "compatible, then use --force (force=True)"
        )
    if _contains_mask(env.data):
        warnings.append(
            "the envelope data holds values masked at capture ('***'); the replay sends them masked"
        )
    return env, warnings


def replay_dead_letter(
    dead_letters: Any,
    record_id: str,
    dispatcher: Any,
    *,
    reason: str,
    dry_run: bool = True,
    force: bool = False,
    actor: str | None = None,
) -> ReplayResult:
    """Send one dead-lettered envelope through ``dispatcher`` again, reusing its id.

    A dry run checks everything and sends nothing. A successful real replay (processed,
    or a duplicate the inbox already answered) marks the record resolved. Every call that
    gets as far as the record is audited with ``actor`` and ``reason``.

    Raises:
        ReplayRefusedError: no reason, no such record, no envelope, no machine for its
            type, or a changed chart without ``force``.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ReplayRefusedError("a replay needs a reason (--reason): say why it is safe now")
    record = dead_letters.get(record_id)
    if record is None:
        raise ReplayRefusedError(f"no dead letter {record_id!r} in this store")
    who = current_actor(actor)
    try:
        env, warnings = _check(record, dispatcher, force)
    except ReplayRefusedError as exc:
        dead_letters.audit(record_id, "replay", actor=who, reason=reason, outcome=f"refused: {exc}")
        raise
    if dry_run:
        dead_letters.audit(record_id, "replay", actor=who, reason=reason, outcome="dry_run")
        return ReplayResult(record_id, True, "dry_run", warnings)
    result = dispatcher.handle(env, record.topic)
    outcome = result.outcomes[0][1] if result.outcomes else "ignored"
    if outcome in ("processed", "duplicate"):
        dead_letters.mark_resolved(record_id)
    dead_letters.audit(record_id, "replay", actor=who, reason=reason, outcome=outcome)
    emit(
        FactKind.DEAD_LETTER_REPLAYED,
        source="dispatcher",
        machine=record.machine_id,
        record_id=record_id,
        reason=record.reason,
        outcome=outcome,
    )
    return ReplayResult(record_id, False, outcome, warnings)
