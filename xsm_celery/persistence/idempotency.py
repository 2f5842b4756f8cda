"""``IdempotencyPlugin``: a redelivered event is answered with its first receipt, not re-run.

At-least-once delivery plus an inbox gives effectively-once transitions. The plugin claims
the event's idempotency key before the event runs and marks it with the receipt after;
inside ``persisted()`` the mark is written in the snapshot's transaction, so a crash can
leave neither a saved state without its receipt nor a receipt without its state.

The dispatcher uses ``admit`` / ``complete`` / ``abandon`` directly; on an interpreter the
plugin does the same from its hooks for events that carry a key.
"""

from __future__ import annotations

import enum
import hashlib
import json
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

from xsm_celery.engine import Event, InterpreterView, PluginBase, Receipt
from xsm_celery.errors import StoreError
from xsm_celery.persistence.inbox import fingerprint
from xsm_celery.persistence.persisted import is_persisted
from xsm_celery.persistence.protocols import Inbox

__all__ = [
    "DEFAULT_IN_FLIGHT_TTL_S",
    "IDEMPOTENCY_KEY",
    "MAX_SCOPE_LENGTH",
    "Admission",
    "AdmissionKind",
    "IdempotencyPlugin",
    "default_key",
    "receipt_from_json",
    "receipt_to_json",
]

#: The payload field a plain ``send()`` carries its idempotency key in.
IDEMPOTENCY_KEY = "idempotency_key"
#: The longest inbox scope kept as it is: the narrowest inbox ``scope`` column (255).
MAX_SCOPE_LENGTH = 255
#: Seconds an in-flight claim lives: a consumer that crashed mid-event blocks no longer.
DEFAULT_IN_FLIGHT_TTL_S = 300.0


class AdmissionKind(enum.Enum):
    """What the inbox says about an event before it runs."""

    NEW = "new"
    DUPLICATE = "duplicate"
    MISMATCH = "mismatch"
    IN_FLIGHT = "in_flight"


class Admission(NamedTuple):
    """The inbox's answer: the kind, and for a duplicate the first receipt."""

    kind: AdmissionKind
    receipt: Receipt | None = None


def default_key(event: Event) -> str | None:
    """Return the event's ``idempotency_key`` payload field, or ``None`` (not deduplicated)."""
    key = event.payload.get(IDEMPOTENCY_KEY)
    return key if isinstance(key, str) and key else None


def receipt_to_json(receipt: Receipt) -> str:
    """Encode what a redelivery is answered with: the states reached and whether it moved."""
    return json.dumps({"state_ids": sorted(receipt.state_ids), "changed": receipt.changed})


def receipt_from_json(text: str) -> Receipt:
    """Decode a stored receipt as a duplicate answer."""
    try:
        raw = json.loads(text)
        return Receipt(frozenset(raw["state_ids"]), bool(raw["changed"]), duplicate=True)
    except (ValueError, KeyError, TypeError):
        return Receipt(frozenset(), False, duplicate=True)


class IdempotencyPlugin(PluginBase):
    """Deduplicate events on an inbox, keyed per principal and instance.

    Args:
        inbox: An ``Inbox`` (``MemoryInbox``, ``SQLiteInbox``, a SQL or Redis one).
        key_of: ``(event) -> key | None``; default the payload's ``idempotency_key``.
        principal: Who may not collide with whom: the dispatcher uses the envelope source.
        ttl_s: How long a receipt is kept (``None``: until purged).
        in_flight_ttl_s: How long a claim of an event still running blocks redeliveries.
    """

    def __init__(
        self,
        inbox: Inbox,
        *,
        key_of: Callable[[Event], str | None] = default_key,
        principal: str = "",
        ttl_s: float | None = None,
        in_flight_ttl_s: float = DEFAULT_IN_FLIGHT_TTL_S,
    ) -> None:
        self.inbox = inbox
        self.key_of = key_of
        self.principal = principal
        self.ttl_s = ttl_s
        self.in_flight_ttl_s = in_flight_ttl_s
        self._lock = threading.Lock()
        self._claims: weakref.WeakKeyDictionary[Any, list[tuple[str, str, Event]]] = (
            weakref.WeakKeyDictionary()
        )
        self._done: weakref.WeakKeyDictionary[Any, list[tuple[str, str, Receipt]]] = (
            weakref.WeakKeyDictionary()
        )
        self._written: weakref.WeakKeyDictionary[Any, list[tuple[str, str, Receipt]]] = (
            weakref.WeakKeyDictionary()
        )

    @staticmethod
    def scope_for(principal: str, instance_key: str) -> str:
        """Return the inbox scope of an instance as seen from one principal.

        A scope longer than an inbox key column (``MAX_SCOPE_LENGTH``) is replaced by its
        SHA-256, so every principal and instance key an envelope may carry fits every inbox.
        """
        scope = json.dumps([principal, instance_key], separators=(",", ":"))
        if len(scope) <= MAX_SCOPE_LENGTH:
            return scope
        return "sha256:" + hashlib.sha256(scope.encode("utf-8")).hexdigest()

    def admit(self, scope: str, key: str, fp: str) -> Admission:
        """Claim ``key`` for a new event, or say why it must not run now."""
        entry = self.inbox.get(scope, key)
        if entry is None:
            if self.inbox.claim(scope, key, fp, ttl_s=self.in_flight_ttl_s):
                return Admission(AdmissionKind.NEW)
            entry = self.inbox.get(scope, key)
            if entry is None:
                return Admission(AdmissionKind.IN_FLIGHT)
        if entry.receipt is None:
            return Admission(AdmissionKind.IN_FLIGHT)
        if entry.fingerprint and entry.fingerprint != fp:
            return Admission(AdmissionKind.MISMATCH)
        return Admission(AdmissionKind.DUPLICATE, receipt_from_json(entry.receipt))

    def complete(self, scope: str, key: str, receipt: Receipt) -> None:
        """Record the receipt of a claimed key."""
        self.inbox.mark(scope, key, receipt_to_json(receipt), ttl_s=self.ttl_s)

    def abandon(self, scope: str, key: str) -> None:
        """Release a claim whose event did not complete, so a redelivery may run it."""
        self.inbox.release(scope, key)

    def _scope(self, interp: Any) -> str:
        return self.scope_for(self.principal, str(interp.store_key or interp.id))

    def on_before_send(self, i: InterpreterView, event: Event) -> Receipt | None:
        """Answer a known key from the inbox; claim a new one."""
        key = self.key_of(event)
        if key is None:
            return None
        scope = self._scope(i)
        admission = self.admit(scope, key, fingerprint(event.type, event.payload))
        current = frozenset(i.current_state_ids)
        if admission.kind is AdmissionKind.DUPLICATE:
            return admission.receipt
        if admission.kind is AdmissionKind.MISMATCH:
            error = StoreError(
                f"idempotency key {key!r} was first used with another event or payload; "
                "mint a new key per event"
            )
            return Receipt(current, False, error)
        if admission.kind is AdmissionKind.IN_FLIGHT:
            error = StoreError(f"event with idempotency key {key!r} is still being processed")
            return Receipt(current, False, error)
        with self._lock:
            self._claims.setdefault(i, []).append((scope, key, event))
        return None

    def on_event_processed(self, i: InterpreterView, event: Event, receipt: Receipt) -> None:
        """Mark the claimed key now, or at the save when inside ``persisted()``."""
        with self._lock:
            claims = self._claims.get(i, [])
            match = next((c for c in claims if c[2] is event), None)
            if match is None:
                return
            claims.remove(match)
            if is_persisted(i):
                self._done.setdefault(i, []).append((match[0], match[1], receipt))
                return
        self.complete(match[0], match[1], receipt)

    def shares_transaction(self, store: Any) -> bool:
        """Whether the inbox writes in ``store``'s transaction (then receipts go in it)."""
        shares = getattr(self.inbox, "shares_transaction_with", None)
        return bool(shares is not None and shares(store))

    def on_persist(self, i: InterpreterView, store: Any) -> None:
        """Write the receipts in the snapshot's transaction when the inbox shares it."""
        if not self.shares_transaction(store):
            return
        with self._lock:
            done = self._done.pop(i, [])
            self._written.setdefault(i, []).extend(done)
        for scope, key, receipt in done:
            self.complete(scope, key, receipt)

    def on_commit(self, i: InterpreterView) -> None:
        """The save committed: write the receipts an unshared inbox still waits for."""
        with self._lock:
            done = self._done.pop(i, [])
            self._written.pop(i, None)
        for scope, key, receipt in done:
            self.complete(scope, key, receipt)

    def on_rollback(self, i: InterpreterView) -> None:
        """Nothing was saved: release every claim so redeliveries run again."""
        with self._lock:
            pending = [(s, k) for s, k, _ in self._claims.pop(i, [])]
            pending += [(s, k) for s, k, _ in self._done.pop(i, [])]
            pending += [(s, k) for s, k, _ in self._written.pop(i, [])]
        for scope, key in pending:
            self.abandon(scope, key)
