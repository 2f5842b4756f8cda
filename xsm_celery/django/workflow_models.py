"""Models of durable workflows: one summary row per instance and the transition log.

Both are written by the workflow step in the snapshot's transaction (``DjangoWorkflowJournal``),
so the admin's list and an instance's history never disagree with the snapshot. The snapshot
itself stays in ``MachineSnapshot`` under the key ``<workflow>:<key>``.
"""

from __future__ import annotations

import datetime as dt

from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = ["WorkflowInstance", "WorkflowTransition"]


class WorkflowInstance(models.Model):
    """One workflow instance as the admin lists it: machine, key, state, status, last update."""

    id: models.BigAutoField[int, int] = models.BigAutoField(
        _("row"), primary_key=True,
        help_text=_("Row number; instances are found by workflow and key."),
    )
    workflow: models.CharField[str, str] = models.CharField(
        _("workflow"), max_length=120, db_index=True,
        help_text=_("Name of the workflow (xsm.workflow(..., name=...))."),
    )
    key: models.CharField[str, str] = models.CharField(
        _("key"), max_length=255,
        help_text=_("Business key of the instance (an order number...)."),
    )
    machine_id: models.CharField[str, str] = models.CharField(
        _("machine"), max_length=120, db_index=True,
        help_text=_("Id of the chart the instance runs."),
    )
    state: models.CharField[str, str] = models.CharField(
        _("state"), max_length=500, db_index=True,
        help_text=_("Active leaf states, comma separated."),
    )
    status: models.CharField[str, str] = models.CharField(
        _("status"), max_length=20, db_index=True,
        help_text=_("running, done or stopped."),
    )
    updated_at: models.FloatField[float, float] = models.FloatField(
        _("updated at (epoch s)"),
        help_text=_("When the last step committed, in epoch seconds."),
    )
    updated: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        _("last update"), db_index=True,
        help_text=_("When the last step committed, as a date."),
    )

    class Meta:
        verbose_name = _("workflow instance")
        verbose_name_plural = _("workflow instances")
        ordering = ("-updated_at",)
        constraints = (
            models.UniqueConstraint(fields=("workflow", "key"), name="xsm_workflow_instance_key"),
        )

    def __str__(self) -> str:
        return f"{self.workflow}:{self.key} ({self.state})"

    @property
    def store_key(self) -> str:
        """The key of its snapshot in ``MachineSnapshot``."""
        return f"{self.workflow}:{self.key}"


class WorkflowTransition(models.Model):
    """One transition a workflow step took, written with the step's snapshot."""

    id: models.BigAutoField[int, int] = models.BigAutoField(
        _("entry"), primary_key=True,
        help_text=_("Increasing entry number; the log reads in this order."),
    )
    workflow: models.CharField[str, str] = models.CharField(
        _("workflow"), max_length=120,
        help_text=_("Name of the workflow."),
    )
    key: models.CharField[str, str] = models.CharField(
        _("key"), max_length=255,
        help_text=_("Business key of the instance."),
    )
    event: models.CharField[str, str] = models.CharField(
        _("event"), max_length=255, blank=True, default="",
        help_text=_("Event type that triggered the transition (engine events included)."),
    )
    message: models.CharField[str, str] = models.CharField(
        _("message"), max_length=20, blank=True, default="",
        help_text=_("What kind of step took it: event, start, timer, done or error."),
    )
    source: models.CharField[str, str] = models.CharField(
        _("from"), max_length=500, blank=True, default="",
        help_text=_("Active leaf states before."),
    )
    target: models.CharField[str, str] = models.CharField(
        _("to"), max_length=500, blank=True, default="",
        help_text=_("Active leaf states after."),
    )
    at: models.FloatField[float, float] = models.FloatField(
        _("at (epoch s)"),
        help_text=_("When the step ran, in epoch seconds."),
    )
    created: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        _("when"),
        help_text=_("When the step ran, as a date."),
    )

    class Meta:
        verbose_name = _("workflow transition")
        verbose_name_plural = _("workflow transitions")
        ordering = ("-id",)
        indexes = (models.Index(fields=("workflow", "key", "id"), name="xsm_wf_transition_key"),)

    def __str__(self) -> str:
        return f"{self.workflow}:{self.key} {self.source} -> {self.target}"
