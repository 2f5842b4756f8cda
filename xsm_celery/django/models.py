"""Database models: dead letters and their audit trail, outbox, inbox, snapshots, timers, workflows.

A workflow has one summary row per instance and its transition log, both written by the workflow
step in the snapshot's transaction (``DjangoWorkflowJournal``), so the admin's list and an
instance's history never disagree with the snapshot. The snapshot itself stays in
``MachineSnapshot`` under the key ``<workflow>:<key>``.
"""

from __future__ import annotations

import datetime as dt

from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = [
    "AuditAction",
    "AuditEntry",
    "DeadLetterRecord",
    "DurableTimer",
    "InboxRecord",
    "MachineSnapshot",
    "OutboxMessage",
    "WorkflowInstance",
    "WorkflowTransition",
]


class AuditAction(models.TextChoices):
    """What an operator did to a dead letter."""

    REPLAY = "replay", _("replay")
    DRY_RUN = "dry_run", _("replay dry run")
    RESOLVE = "resolve", _("resolve")
    PURGE = "purge", _("purge")


class DeadLetterRecord(models.Model):
    """One dead letter: work that gave up, kept for an operator to triage or replay.

    The columns mirror ``xsm_celery.patterns.DeadLetter`` one to one, plus a few derived
    columns (``taken_on``, ``last_error``, ``error_text``, ``subject``) that exist so the
    admin can filter, search and build a date hierarchy without parsing JSON in SQL.
    """

    id: models.CharField[str, str] = models.CharField(
        _("id"),
        max_length=64,
        primary_key=True,
        help_text=_("Sortable record id (UUIDv7 style); newer records sort later."),
    )
    machine_id: models.CharField[str, str] = models.CharField(
        _("machine"),
        max_length=200,
        db_index=True,
        help_text=_("Id of the chart whose run gave up."),
    )
    state_id: models.CharField[str, str] = models.CharField(
        _("state"),
        max_length=300,
        help_text=_("Full dotted id of the state the machine was in when it gave up."),
    )
    event: models.JSONField = models.JSONField(
        _("event"),
        default=dict,
        blank=True,
        help_text=_("The event being handled: {type, payload}."),
    )
    attempts: models.PositiveIntegerField[int | None, int | None] = models.PositiveIntegerField(
        _("attempts"),
        null=True,
        blank=True,
        help_text=_("Attempts made before giving up; empty when not counted."),
    )
    errors: models.JSONField = models.JSONField(
        _("error chain"),
        default=list,
        blank=True,
        help_text=_("Failures oldest first, each {source, name, type, message}."),
    )
    snapshot: models.JSONField = models.JSONField(
        _("snapshot"),
        default=dict,
        blank=True,
        help_text=_("Redacted machine snapshot at the moment it gave up."),
    )
    taken_at: models.FloatField[float, float] = models.FloatField(
        _("taken at (epoch s)"),
        db_index=True,
        help_text=_("When the record was written, in epoch seconds (exact)."),
    )
    taken_on: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        _("taken on"),
        db_index=True,
        help_text=_("When the record was written, as a date for filters and the hierarchy."),
    )
    reason: models.CharField[str, str] = models.CharField(
        _("reason"),
        max_length=32,
        db_index=True,
        help_text=_("Why the work was dead-lettered (dead_letter_state, max_attempts, ...)."),
    )
    envelope: models.JSONField = models.JSONField(
        _("envelope"),
        null=True,
        blank=True,
        help_text=_("The redacted CloudEvents envelope, for envelope dead letters."),
    )
    topic: models.CharField[str | None, str | None] = models.CharField(
        _("topic"),
        max_length=255,
        null=True,
        blank=True,
        help_text=_("Topic the envelope came from, for envelope dead letters."),
    )
    subject: models.CharField[str | None, str | None] = models.CharField(
        _("subject"),
        max_length=255,
        null=True,
        blank=True,
        db_index=True,
        help_text=_("The envelope subject (the instance key), copied for search."),
    )
    machine_hash: models.CharField[str | None, str | None] = models.CharField(
        _("chart hash"),
        max_length=128,
        null=True,
        blank=True,
        help_text=_("Structure hash of the chart; replay is refused when it has changed."),
    )
    machine_version: models.CharField[str | None, str | None] = models.CharField(
        _("chart version"),
        max_length=64,
        null=True,
        blank=True,
        help_text=_("The chart's version key, if it declares one."),
    )
    resolved_at: models.FloatField[float | None, float | None] = models.FloatField(
        _("resolved at (epoch s)"),
        null=True,
        blank=True,
        db_index=True,
        help_text=_("When an operator resolved or replayed it; empty while open."),
    )
    task_name: models.CharField[str | None, str | None] = models.CharField(
        _("task"),
        max_length=255,
        null=True,
        blank=True,
        db_index=True,
        help_text=_("Celery task name, for task dead letters."),
    )
    task_id: models.CharField[str | None, str | None] = models.CharField(
        _("task id"),
        max_length=255,
        null=True,
        blank=True,
        db_index=True,
        help_text=_("Celery task id of the run that gave up."),
    )
    task_args: models.JSONField = models.JSONField(
        _("task args"),
        null=True,
        blank=True,
        help_text=_("Redacted positional arguments of the task."),
    )
    task_kwargs: models.JSONField = models.JSONField(
        _("task kwargs"),
        null=True,
        blank=True,
        help_text=_("Redacted keyword arguments of the task."),
    )
    hostname: models.CharField[str | None, str | None] = models.CharField(
        _("worker"),
        max_length=255,
        null=True,
        blank=True,
        help_text=_("Hostname of the worker that ran the last attempt."),
    )
    last_error: models.CharField[str, str] = models.CharField(
        _("last error"),
        max_length=500,
        blank=True,
        default="",
        help_text=_("'Type: message' of the newest error, shown in the list."),
    )
    error_text: models.TextField[str, str] = models.TextField(
        _("error text"),
        blank=True,
        default="",
        help_text=_("Every error of the chain as text, for search."),
    )

    class Meta:
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")
        ordering = ("-taken_at", "-id")
        permissions = (
            ("replay_deadletterrecord", _("Can replay dead letters")),
            ("purge_deadletterrecord", _("Can purge dead letters")),
        )

    def __str__(self) -> str:
        what = self.task_name or self.machine_id
        return f"{what} @ {self.state_id} ({self.reason})"


class AuditEntry(models.Model):
    """One operator action on a dead letter: who, when, what, why, and how it went.

    ``record_id`` is a plain column, not a foreign key, so the trail outlives a purge.
    """

    id: models.BigAutoField[int, int] = models.BigAutoField(
        _("entry"),
        primary_key=True,
        help_text=_("Increasing entry number; the trail reads in this order."),
    )
    record_id: models.CharField[str, str] = models.CharField(
        _("record id"),
        max_length=64,
        db_index=True,
        help_text=_("Id of the dead letter acted on (kept after the record is purged)."),
    )
    action: models.CharField[str, str] = models.CharField(
        _("action"),
        max_length=32,
        help_text=_("replay, dry_run, resolve or purge (other tools may add their own)."),
    )
    actor: models.CharField[str, str] = models.CharField(
        _("who"),
        max_length=150,
        help_text=_("User name (or tool) that acted."),
    )
    reason: models.TextField[str, str] = models.TextField(
        _("reason"),
        blank=True,
        default="",
        help_text=_("Why the operator acted, as they wrote it."),
    )
    outcome: models.TextField[str, str] = models.TextField(
        _("outcome"),
        blank=True,
        default="",
        help_text=_("What happened: sent task id, refused with why, purged, ..."),
    )
    at: models.FloatField[float, float] = models.FloatField(
        _("at (epoch s)"),
        help_text=_("When the action happened, in epoch seconds (exact)."),
    )
    created: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        _("when"),
        db_index=True,
        help_text=_("When the action happened, as a date."),
    )

    class Meta:
        verbose_name = _("dead-letter audit entry")
        verbose_name_plural = _("dead-letter audit trail")
        ordering = ("id",)

    def __str__(self) -> str:
        return f"{self.action} {self.record_id} by {self.actor}"


class OutboxMessage(models.Model):
    """One envelope waiting to be published, written in the same transaction as the state.

    A relay leases rows with ``claimed_by`` / ``claimed_until`` so that several relays can
    drain one outbox without publishing a row twice at the same time. A row the broker
    refuses counts ``attempts``; at the relay's ``max_attempts`` it gets ``failed_at`` and
    is set aside, so the rows after it are not blocked for ever.
    """

    seq: models.BigAutoField[int, int] = models.BigAutoField(
        _("sequence"),
        primary_key=True,
        help_text=_("Increasing row number; rows are published in this order."),
    )
    topic: models.CharField[str, str] = models.CharField(
        _("topic"),
        max_length=255,
        help_text=_("Topic (routing key) the envelope is published on."),
    )
    envelope_id: models.CharField[str, str] = models.CharField(
        _("envelope id"),
        max_length=64,
        db_index=True,
        help_text=_("CloudEvents id of the envelope; consumers deduplicate on it."),
    )
    event_type: models.CharField[str, str] = models.CharField(
        _("type"),
        max_length=255,
        help_text=_("CloudEvents type of the envelope."),
    )
    subject: models.CharField[str | None, str | None] = models.CharField(
        _("subject"),
        max_length=255,
        null=True,
        blank=True,
        db_index=True,
        help_text=_("CloudEvents subject (the instance key)."),
    )
    envelope: models.TextField[str, str] = models.TextField(
        _("envelope"),
        help_text=_("The envelope as structured-mode JSON, exactly as it will be published."),
    )
    created_at: models.FloatField[float, float] = models.FloatField(
        _("created at (epoch s)"),
        help_text=_("When the row was written, in epoch seconds."),
    )
    created: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        _("created"),
        db_index=True,
        help_text=_("When the row was written, as a date."),
    )
    sent_at: models.FloatField[float | None, float | None] = models.FloatField(
        _("sent at (epoch s)"),
        null=True,
        blank=True,
        db_index=True,
        help_text=_("When the broker accepted it; empty while pending."),
    )
    claimed_by: models.CharField[str | None, str | None] = models.CharField(
        _("claimed by"),
        max_length=128,
        null=True,
        blank=True,
        help_text=_("Relay holding the lease on this row, if any."),
    )
    claimed_until: models.FloatField[float | None, float | None] = models.FloatField(
        _("claimed until (epoch s)"),
        null=True,
        blank=True,
        help_text=_("When the relay's lease runs out; another relay may take it after."),
    )
    attempts: models.PositiveIntegerField[int, int] = models.PositiveIntegerField(
        _("attempts"),
        default=0,
        help_text=_("Times the broker refused this row (outages are not counted)."),
    )
    last_error: models.TextField[str | None, str | None] = models.TextField(
        _("last error"),
        null=True,
        blank=True,
        help_text=_("Why the broker last refused this row."),
    )
    failed_at: models.FloatField[float | None, float | None] = models.FloatField(
        _("failed at (epoch s)"),
        null=True,
        blank=True,
        db_index=True,
        help_text=_(
            "When the row was set aside after its last allowed refusal; a failed "
            "row is never published until it is requeued."
        ),
    )

    class Meta:
        verbose_name = _("outbox message")
        verbose_name_plural = _("outbox")
        ordering = ("seq",)
        indexes = (models.Index(fields=("sent_at", "seq"), name="xsm_outbox_pending"),)

    def __str__(self) -> str:
        return f"#{self.seq} {self.event_type} -> {self.topic}"


class InboxRecord(models.Model):
    """One idempotency key seen by a consumer, so a redelivery is answered, not re-run."""

    id: models.BigAutoField[int, int] = models.BigAutoField(
        _("row"),
        primary_key=True,
        help_text=_("Row number; entries are found by scope and key."),
    )
    scope: models.CharField[str, str] = models.CharField(
        _("scope"),
        max_length=255,
        help_text=_("Principal and instance the key belongs to (source and subject)."),
    )
    key: models.CharField[str, str] = models.CharField(
        _("key"),
        max_length=255,
        help_text=_("Idempotency key, the envelope id by default."),
    )
    fingerprint: models.CharField[str, str] = models.CharField(
        _("fingerprint"),
        max_length=255,
        help_text=_("Identifies the event and payload first seen under this key."),
    )
    receipt: models.TextField[str | None, str | None] = models.TextField(
        _("receipt"),
        null=True,
        blank=True,
        help_text=_("JSON receipt a redelivery is answered with; empty while in flight."),
    )
    expires_at: models.FloatField[float | None, float | None] = models.FloatField(
        _("expires at (epoch s)"),
        null=True,
        blank=True,
        db_index=True,
        help_text=_("When the entry stops counting; empty for never."),
    )
    created: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        _("created"),
        help_text=_("When the key was first claimed."),
    )

    class Meta:
        verbose_name = _("inbox entry")
        verbose_name_plural = _("inbox")
        constraints = (
            models.UniqueConstraint(fields=("scope", "key"), name="xsm_inbox_scope_key"),
        )

    def __str__(self) -> str:
        return f"{self.scope}/{self.key}"


class MachineSnapshot(models.Model):
    """The saved snapshot of one persisted machine instance."""

    id: models.BigAutoField[int, int] = models.BigAutoField(
        _("row"),
        primary_key=True,
        help_text=_("Row number; snapshots are found by key."),
    )
    key: models.CharField[str, str] = models.CharField(
        _("key"),
        max_length=255,
        unique=True,
        help_text=_("Instance key (for the dispatcher, the envelope subject)."),
    )
    snapshot: models.TextField[str, str] = models.TextField(
        _("snapshot"),
        help_text=_("The machine snapshot as JSON, exactly as the engine wrote it."),
    )
    version: models.PositiveBigIntegerField[int, int] = models.PositiveBigIntegerField(
        _("version"),
        help_text=_("Grows by one per save; optimistic locking compares it."),
    )
    machine_version: models.CharField[str, str] = models.CharField(
        _("chart version"),
        max_length=64,
        blank=True,
        default="",
        help_text=_("Version of the chart the snapshot was taken from."),
    )
    updated_at: models.FloatField[float, float] = models.FloatField(
        _("updated at (epoch s)"),
        help_text=_("When it was last saved, in epoch seconds."),
    )
    updated: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        _("updated"),
        db_index=True,
        help_text=_("When it was last saved, as a date."),
    )

    class Meta:
        verbose_name = _("machine snapshot")
        verbose_name_plural = _("machine snapshots")
        ordering = ("key",)

    def __str__(self) -> str:
        return f"{self.key} v{self.version}"


class DurableTimer(models.Model):
    """An ``after`` timer too long for a task countdown, fired by a scanner when due."""

    id: models.CharField[str, str] = models.CharField(
        _("id"),
        max_length=64,
        primary_key=True,
        help_text=_("Sortable timer id."),
    )
    key: models.CharField[str, str] = models.CharField(
        _("instance key"),
        max_length=255,
        db_index=True,
        help_text=_("Key of the machine instance the timer belongs to."),
    )
    due_at: models.FloatField[float, float] = models.FloatField(
        _("due at (epoch s)"),
        db_index=True,
        help_text=_("When the timer fires, in epoch seconds (wall clock)."),
    )
    due: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        _("due"),
        help_text=_("When the timer fires, as a date."),
    )
    payload: models.JSONField = models.JSONField(
        _("payload"),
        default=dict,
        blank=True,
        help_text=_("What the scanner needs to fire it (event, task, arguments)."),
    )
    claimed_by: models.CharField[str | None, str | None] = models.CharField(
        _("claimed by"),
        max_length=128,
        null=True,
        blank=True,
        help_text=_("Scanner holding the lease on this timer, if any."),
    )
    claimed_until: models.FloatField[float | None, float | None] = models.FloatField(
        _("claimed until (epoch s)"),
        null=True,
        blank=True,
        help_text=_("When the scanner's lease runs out."),
    )

    class Meta:
        verbose_name = _("durable timer")
        verbose_name_plural = _("durable timers")
        ordering = ("due_at", "id")

    def __str__(self) -> str:
        return f"{self.key} @ {self.due}"


class WorkflowInstance(models.Model):
    """One workflow instance as the admin lists it: machine, key, state, status, last update."""

    id: models.BigAutoField[int, int] = models.BigAutoField(
        _("row"),
        primary_key=True,
        help_text=_("Row number; instances are found by workflow and key."),
    )
    workflow: models.CharField[str, str] = models.CharField(
        _("workflow"),
        max_length=120,
        db_index=True,
        help_text=_("Name of the workflow (xsm.workflow(..., name=...))."),
    )
    key: models.CharField[str, str] = models.CharField(
        _("key"),
        max_length=255,
        help_text=_("Business key of the instance (an order number...)."),
    )
    machine_id: models.CharField[str, str] = models.CharField(
        _("machine"),
        max_length=120,
        db_index=True,
        help_text=_("Id of the chart the instance runs."),
    )
    state: models.CharField[str, str] = models.CharField(
        _("state"),
        max_length=500,
        db_index=True,
        help_text=_("Active leaf states, comma separated."),
    )
    status: models.CharField[str, str] = models.CharField(
        _("status"),
        max_length=20,
        db_index=True,
        help_text=_("running, done or stopped."),
    )
    updated_at: models.FloatField[float, float] = models.FloatField(
        _("updated at (epoch s)"),
        help_text=_("When the last step committed, in epoch seconds."),
    )
    updated: models.DateTimeField[dt.datetime, dt.datetime] = models.DateTimeField(
        _("last update"),
        db_index=True,
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
        _("entry"),
        primary_key=True,
        help_text=_("Increasing entry number; the log reads in this order."),
    )
    workflow: models.CharField[str, str] = models.CharField(
        _("workflow"),
        max_length=120,
        help_text=_("Name of the workflow."),
    )
    key: models.CharField[str, str] = models.CharField(
        _("key"),
        max_length=255,
        help_text=_("Business key of the instance."),
    )
    event: models.CharField[str, str] = models.CharField(
        _("event"),
        max_length=255,
        blank=True,
        default="",
        help_text=_("Event type that triggered the transition (engine events included)."),
    )
    message: models.CharField[str, str] = models.CharField(
        _("message"),
        max_length=20,
        blank=True,
        default="",
        help_text=_("What kind of step took it: event, start, timer, done or error."),
    )
    source: models.CharField[str, str] = models.CharField(
        _("from"),
        max_length=500,
        blank=True,
        default="",
        help_text=_("Active leaf states before."),
    )
    target: models.CharField[str, str] = models.CharField(
        _("to"),
        max_length=500,
        blank=True,
        default="",
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
