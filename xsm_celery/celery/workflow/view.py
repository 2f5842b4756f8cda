"""``WorkflowView``: a read-only look at one persisted instance, as ``workflow.get(key)`` returns.

Built from the stored snapshot alone, so reading never runs the chart: no entry action, no
timer fires, nothing is locked. ``context`` is the public part (``_xsm_`` keys dropped).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.engine import public_context
from xsm_celery.persistence.protocols import StoredSnapshot
from xsm_celery.persistence.timers import deadlines_of

__all__ = ["PendingTimer", "WorkflowView", "view_of"]


@dataclass(frozen=True)
class PendingTimer:
    """An ``after`` timer the instance waits for: the state that armed it and when it is due."""

    state_id: str
    event_type: str
    due_at: float
    delay_ms: float


@dataclass(frozen=True)
class WorkflowView:
    """One instance at rest.

    Attributes:
        workflow: The workflow's name.
        key: The business key (``"o-42"``).
        value: The state value, as the chart names it (a string or a nested dict).
        state_ids: Full ids of the active leaf states.
        context: The public context (private ``_xsm_`` keys dropped).
        status: ``"running"``, ``"done"`` or ``"stopped"``.
        timers: Pending ``after`` timers, earliest first.
        waiting_for: ``{invoke id: Celery task id}`` of the task steps it waits for.
        version: The store's version of the snapshot (one per step).
        updated_at: Epoch seconds of the last step.
    """

    workflow: str
    key: str
    value: Any
    state_ids: frozenset[str]
    context: dict[str, Any]
    status: str
    timers: tuple[PendingTimer, ...] = ()
    waiting_for: dict[str, str] = field(default_factory=dict)
    version: int = 0
    updated_at: float = 0.0

    def matches(self, state_id: str) -> bool:
        """Whether ``state_id`` (a full dotted id) or one of its children is active."""
        return any(s == state_id or s.startswith(state_id + ".") for s in self.state_ids)


def view_of(workflow: str, key: str, record: StoredSnapshot) -> WorkflowView:
    """The view of a stored record."""
    data = json.loads(record.snapshot)
    context = data.get("context") if isinstance(data.get("context"), dict) else {}
    timers = tuple(
        sorted(
            (
                PendingTimer(
                    str(d.get("state_id")),
                    str(d.get("event_type")),
                    float(d["due_at_wall"]),
                    float(d.get("delay_ms") or 0.0),
                )
                for d in deadlines_of(data)
            ),
            key=lambda t: t.due_at,
        )
    )
    waiting = context.get("_xsm_invocations")
    return WorkflowView(
        workflow=workflow,
        key=key,
        value=data.get("value"),
        state_ids=frozenset(data.get("state_ids") or ()),
        context=public_context(context),
        status=str(data.get("status")),
        timers=timers,
        waiting_for=dict(waiting) if isinstance(waiting, dict) else {},
        version=record.version,
        updated_at=record.updated_at,
    )
