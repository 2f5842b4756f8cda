"""What travels between a workflow and its steps: a step's message, and a task step to send.

Plain data with no behaviour beyond parsing, so the step, the payload builders, the Celery
service and the replay can all import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xsm_celery.errors import WorkflowStepError

#: Inbox keys with this prefix hold a message's failure ledger (``ledger``), never a receipt.
LEDGER_KEY_PREFIX = "ledger:"

__all__ = ["DEFAULT_TASK_STEP_TIMEOUT_S", "MESSAGE_KINDS", "Dispatch", "Message"]

#: Seconds a task step may go without a completion before the Beat scan looks for it: ten
#: minutes, longer than most tasks with their own retries; a longer task sets its own
#: ``timeout_s`` (a task still running is left alone only when the result backend says so).
DEFAULT_TASK_STEP_TIMEOUT_S = 600.0

MESSAGE_KINDS = ("event", "start", "timer", "done", "error")


@dataclass(frozen=True)
class Message:
    """What one step task carries: an id for the inbox, a kind, and the event or completion."""

    id: str
    kind: str
    type: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    invoke: str = ""
    dispatch: str = ""
    data: Any = None
    due_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the task message carries."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind}
        for name in ("type", "invoke", "dispatch"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.payload:
            out["payload"] = dict(self.payload)
        if self.data is not None:
            out["data"] = self.data
        if self.due_at is not None:
            out["due_at"] = self.due_at
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> Message:
        """Validate a message off the wire.

        Raises:
            WorkflowStepError: not a mapping, an unknown kind, a missing id or type.
        """
        if not isinstance(raw, dict):
            raise WorkflowStepError(f"a workflow message is a JSON object, got {raw!r:.80}")
        ident, kind = raw.get("id"), raw.get("kind")
        if (
            not isinstance(ident, str)
            or not ident
            or kind not in MESSAGE_KINDS
            or ident.startswith(LEDGER_KEY_PREFIX)
        ):
            raise WorkflowStepError(
                f"workflow message needs a non-empty 'id' and a 'kind' in {MESSAGE_KINDS}: "
                f"{raw!r:.200}"
            )
        payload = raw.get("payload") or {}
        if not isinstance(payload, dict):
            raise WorkflowStepError(f"workflow message payload must be an object: {payload!r:.80}")
        if kind == "event" and not (isinstance(raw.get("type"), str) and raw["type"]):
            raise WorkflowStepError(f"workflow event message has no 'type': {raw!r:.200}")
        due = raw.get("due_at")
        return cls(
            id=ident,
            kind=str(kind),
            type=str(raw.get("type") or ""),
            payload=dict(payload),
            invoke=str(raw.get("invoke") or ""),
            dispatch=str(raw.get("dispatch") or ""),
            data=raw.get("data"),
            due_at=float(due) if isinstance(due, int | float) else None,
        )


@dataclass
class Dispatch:
    """A Celery task a step asked for; sent only after the step commits."""

    invoke_id: str
    task_name: str
    args: list[Any]
    kwargs: dict[str, Any]
    task_id: str
    options: dict[str, Any]
    key: str = ""
    #: Seconds without a completion after which the Beat scan asks the result backend and
    #: sends the task again (``celery_service(..., timeout_s=...)``).
    timeout_s: float = DEFAULT_TASK_STEP_TIMEOUT_S
