"""The app's Django admin: every table, the dead-letter triage pages, fleet and status pages.

Django's admin autodiscovery imports this package, which registers everything with the
default site (``tables``). ``dead_letters`` and ``views`` are the triage pages, ``instances``
the workflow instances, ``fleet`` and ``status`` the pages that are not models.
"""

from __future__ import annotations

from xsm_celery.django.admin.dead_letters import DeadLetterRecordAdmin
from xsm_celery.django.admin.instances import WorkflowInstanceAdmin
from xsm_celery.django.admin.tables import (
    AuditEntryAdmin,
    DurableTimerAdmin,
    InboxRecordAdmin,
    MachineSnapshotAdmin,
    OutboxMessageAdmin,
)

__all__ = [
    "AuditEntryAdmin",
    "DeadLetterRecordAdmin",
    "DurableTimerAdmin",
    "InboxRecordAdmin",
    "MachineSnapshotAdmin",
    "OutboxMessageAdmin",
    "WorkflowInstanceAdmin",
]
