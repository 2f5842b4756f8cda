"""The counters that decide a failing step's fate, kept in the store rather than in messages.

A step task's message is written by whoever can reach the broker, so nothing in it may
decide a policy: a forged ``failures=99`` must not skip the retries, nor ``failures=-10**6``
keep a poisoned message looping, nor a forged error list land in a dead letter. So the
counted failures, the lost runs and the error chain of one message live in the workflow's
own inbox, next to that message's receipt: scope the instance's store key, key a digest of
the message id (``ledger:<sha256>``), value the JSON of ``StepLedger``. The ledger is
written only when a run fails or is lost, in a short transaction of its own (the step's
transaction was rolled back), and read only on those paths: a step that succeeds first
time never touches it.

A store that cannot be reached while a failure is being counted is an outage: the run is
deferred uncounted, as a step that met the outage would be, and the failure is met again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from xsm_celery.celery.workflow.messages import LEDGER_KEY_PREFIX
from xsm_celery.persistence.protocols import Inbox

__all__ = ["MAX_LEDGER_ERRORS", "StepLedger", "ledger_key", "read_ledger", "write_ledger"]


#: Error-chain entries a ledger keeps (the oldest go first), so a long outage of retries
#: cannot grow one row without bound.
MAX_LEDGER_ERRORS = 20


@dataclass(frozen=True)
class StepLedger:
    """What the store knows of one message's failed runs.

    Attributes:
        failures: Runs that failed and were counted (an action or guard raised, the store
            refused a value).
        lost: Runs whose worker died before they committed.
        errors: The error chain, oldest first, as ``error_entry`` dicts.
    """

    failures: int = 0
    lost: int = 0
    errors: tuple[dict[str, str], ...] = field(default_factory=tuple)

    @property
    def counted(self) -> int:
        """Runs the retry policy counts: failed and lost ones."""
        return self.failures + self.lost

    def with_failure(self, entry: dict[str, str]) -> StepLedger:
        """This ledger with one more counted failure."""
        return replace(self, failures=self.failures + 1, errors=_kept(self.errors, [entry]))

    def with_lost(self, entries: list[dict[str, str]]) -> StepLedger:
        """This ledger with one lost run per entry."""
        return replace(self, lost=self.lost + len(entries), errors=_kept(self.errors, entries))

    def to_json(self) -> str:
        """The stored form."""
        return json.dumps(
            {"failures": self.failures, "lost": self.lost, "errors": list(self.errors)},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> StepLedger:
        """Parse a stored ledger; anything unreadable counts as no ledger (nothing counted)."""
        try:
            data = json.loads(text or "{}")
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        errors = data.get("errors")
        return cls(
            failures=_count(data.get("failures")),
            lost=_count(data.get("lost")),
            errors=tuple(e for e in errors if isinstance(e, dict))
            if isinstance(errors, list)
            else (),
        )


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(value, 0)


def _kept(old: tuple[dict[str, str], ...], new: list[dict[str, str]]) -> tuple[dict[str, str], ...]:
    return (*old, *new)[-MAX_LEDGER_ERRORS:]


def ledger_key(message_id: str) -> str:
    """The inbox key of a message's ledger: a digest, so any message id fits the column."""
    digest = hashlib.sha256(message_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return f"{LEDGER_KEY_PREFIX}{digest}"


def read_ledger(inbox: Inbox, store_key: str, message_id: str) -> StepLedger:
    """The ledger of ``message_id`` on instance ``store_key`` (empty when none was written).

    Raises:
        StoreUnavailableError: the store is down (the caller defers the run uncounted).
    """
    entry = inbox.get(store_key, ledger_key(message_id))
    return StepLedger() if entry is None else StepLedger.from_json(entry.receipt)


def write_ledger(
    inbox: Inbox, store_key: str, message_id: str, ledger: StepLedger, ttl_s: float | None
) -> None:
    """Store ``ledger``; it expires with the message's inbox receipt.

    Raises:
        StoreUnavailableError: the store is down (the caller defers the run uncounted).
    """
    inbox.mark(store_key, ledger_key(message_id), ledger.to_json(), ttl_s=ttl_s)
