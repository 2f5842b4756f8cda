"""``DjangoWorkflowJournal``: a workflow step's summary row and transition log, in its transaction.

The Celery workflow step calls ``record`` inside the snapshot's ``atomic`` block on the same
database alias, so the rows commit or roll back with the snapshot.
"""

from __future__ import annotations

from typing import Any

from xsm_celery.django.stores.base import DjangoStoreBase
from xsm_celery.django.stores.dates import to_datetime
from xsm_celery.django.stores.errors import store_errors

__all__ = ["DjangoWorkflowJournal"]


class DjangoWorkflowJournal(DjangoStoreBase):
    """Writes ``WorkflowInstance`` and ``WorkflowTransition`` rows for workflow steps.

    Args:
        using: Database alias; ``XSM_CELERY["DATABASE"]`` when None. Use the snapshot
            store's alias.
    """

    def record(self, summary: dict[str, Any], transitions: list[dict[str, Any]]) -> None:
        """Upsert the instance's summary and append the step's transitions."""
        from xsm_celery.django.models import WorkflowInstance, WorkflowTransition

        updated_at = float(summary["updated_at"])
        values = {
            "machine_id": str(summary["machine_id"])[:120],
            "state": str(summary["state"])[:500],
            "status": str(summary["status"])[:20],
            "updated_at": updated_at,
            "updated": to_datetime(updated_at),
        }
        with store_errors("journal", self.using):
            rows = WorkflowInstance.objects.using(self.using)
            if not rows.filter(workflow=summary["workflow"], key=summary["key"]).update(**values):
                rows.create(workflow=summary["workflow"], key=summary["key"], **values)
            if transitions:
                WorkflowTransition.objects.using(self.using).bulk_create(
                    [_transition(t) for t in transitions]
                )


def _transition(entry: dict[str, Any]) -> Any:
    from xsm_celery.django.models import WorkflowTransition

    at = float(entry["at"])
    return WorkflowTransition(
        workflow=entry["workflow"],
        key=entry["key"],
        event=str(entry.get("event") or "")[:255],
        message=str(entry.get("message") or "")[:20],
        source=", ".join(entry.get("source") or [])[:500],
        target=", ".join(entry.get("target") or [])[:500],
        at=at,
        created=to_datetime(at),
    )
