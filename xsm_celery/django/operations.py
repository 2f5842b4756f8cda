"""What an operator can do to dead letters: plan and run a replay, resolve, purge.

The admin and the ``xsm_dlq`` management command both go through here, so both refuse
the same things and write the same audit rows. Every real action is audited, including a
refused replay: the trail shows who tried what, and why it did not happen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.django.charts import ChartInfo, find_chart
from xsm_celery.django.conf import get_settings, import_string
from xsm_celery.django.stores import DjangoDeadLetterStore
from xsm_celery.errors import ReplayRefusedError, XsmError
from xsm_celery.patterns.dead_letter import DeadLetter

__all__ = ["DeadLetterOperations", "ReplayOutcome", "ReplayPlan"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayPlan:
    """What a replay of one record would do: the dry run shown before confirming.

    ``kind`` is ``task``, ``envelope`` or ``state`` (a chart-state capture, which has
    nothing to send again). ``refusal`` says why it cannot be replayed at all.
    """

    record: DeadLetter
    kind: str
    chart: ChartInfo
    preview: str = ""
    refusal: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def chart_changed(self) -> bool:
        """Whether the chart's structure changed since the record was captured."""
        return self.chart.changed_since(self.record)


@dataclass(frozen=True)
class ReplayOutcome:
    """What a real replay did: ``sent`` (with the new task id), ``refused`` or ``failed``."""

    record_id: str
    status: str
    detail: str
    task_id: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the work was sent again."""
        return self.status == "sent"


class DeadLetterOperations:
    """Replay, resolve and purge dead letters, auditing each action.

    Args:
        store: The dead-letter store; a ``DjangoDeadLetterStore()`` by default.
        app: The Celery app task replays go through; ``XSM_CELERY["CELERY_APP"]`` (or
            Celery's current app) when None, resolved on first use.
        replay_task: The function that re-sends a task record; ``xsm_celery.celery``'s
            ``replay_task`` by default.
    """

    def __init__(
        self,
        store: Any = None,
        app: Any = None,
        *,
        replay_task: Callable[..., Any] | None = None,
    ) -> None:
        self.store = store if store is not None else DjangoDeadLetterStore()
        self._app = app
        self._replay_task = replay_task

    @property
    def app(self) -> Any:
        """The Celery app (resolved lazily)."""
        if self._app is None:
            from xsm_celery.django.admin.celery_app import celery_app

            self._app = celery_app()
        return self._app

    def plan(self, record: DeadLetter) -> ReplayPlan:
        """The dry run of replaying ``record``; nothing is sent, changed or audited."""
        if record.task_name:
            return self._plan_task(record)
        chart = find_chart(record)
        if record.envelope is not None:
            refusal = (
                None
                if get_settings().dispatcher
                else (
                    "envelope dead letters replay through their dispatcher: set "
                    "XSM_CELERY['DISPATCHER'] to it, or use xsm-celery dlq replay"
                )
            )
            preview = f"would re-dispatch envelope {record.envelope.get('id')} from {record.topic}"
            return ReplayPlan(record, "envelope", chart, preview, refusal)
        return ReplayPlan(
            record,
            "state",
            chart,
            refusal=(
                "captured from a chart state, not a task or an envelope: there is nothing to "
                "send again; fix the cause by hand, then resolve it"
            ),
        )

    def _plan_task(self, record: DeadLetter) -> ReplayPlan:
        try:
            app = self.app
            chart = find_chart(record, app=app)
            result = self._task_replayer()(self.store, record.id, app, dry_run=True)
        except ReplayRefusedError as exc:
            return ReplayPlan(record, "task", find_chart(record, app=self._app), refusal=str(exc))
        except XsmError as exc:
            return ReplayPlan(record, "task", ChartInfo(None, "none"), refusal=str(exc))
        preview = str(getattr(result, "outcome", result))
        warnings = [str(w) for w in getattr(result, "warnings", ()) or ()]
        return ReplayPlan(record, "task", chart, preview, None, warnings)

    def replay(
        self, record_id: str, *, actor: str, reason: str, force: bool = False
    ) -> ReplayOutcome:
        """Send ``record_id`` again.

        Refused (and audited) without a reason, for a record that cannot be replayed, and,
        for an envelope, when the chart changed since capture unless ``force`` is set.
        """
        record = self.store.get(record_id)
        if record is None:
            return ReplayOutcome(record_id, "refused", f"no dead letter with id {record_id!r}")
        if not reason or not reason.strip():
            return self._refuse(record_id, actor, reason, "a replay needs a reason; it is audited")
        plan = self.plan(record)
        if plan.refusal:
            return self._refuse(record_id, actor, reason, plan.refusal)
        if plan.chart_changed and plan.kind != "task":
            # A task replay starts the task's current chart from attempt 1, so a changed
            # chart is shown as a warning, not refused: only an envelope replay needs force.
            change = (
                f"chart changed since capture ({record.machine_hash} -> "
                f"{plan.chart.structure_hash})"
            )
            if not force:
                return self._refuse(record_id, actor, reason, f"{change}; tick force to replay")
            self.store.audit(
                record_id,
                "force",
                actor=actor,
                reason=reason,
                outcome=f"{change}; replay allowed by the operator",
            )
        if plan.kind == "task":
            return self._send_task(record_id, actor, reason)
        return self._send_envelope(record_id, actor, reason, force)

    def _send_task(self, record_id: str, actor: str, reason: str) -> ReplayOutcome:
        def send() -> Any:
            return self._task_replayer()(
                self.store, record_id, self.app, reason=reason, dry_run=False, actor=actor
            )

        return self._run(record_id, actor, reason, send)

    def _send_envelope(self, record_id: str, actor: str, reason: str, force: bool) -> ReplayOutcome:
        def send() -> Any:
            from xsm_celery import eda

            replay_dead_letter = getattr(eda, "replay_dead_letter", None)
            if replay_dead_letter is None:
                raise ReplayRefusedError("this installation has no eda.replay_dead_letter")
            dispatcher = import_string(str(get_settings().dispatcher))
            if callable(dispatcher) and not hasattr(dispatcher, "handle"):
                dispatcher = dispatcher()
            return replay_dead_letter(
                self.store,
                record_id,
                dispatcher,
                reason=reason,
                dry_run=False,
                force=force,
                actor=actor,
            )

        return self._run(record_id, actor, reason, send)

    def _run(
        self, record_id: str, actor: str, reason: str, send: Callable[[], Any]
    ) -> ReplayOutcome:
        """Call ``send``; audit its refusal or failure, and its success if it did not itself."""
        before = len(self.store.audit_log(record_id))
        try:
            result = send()
        except ReplayRefusedError as exc:
            return self._refuse(record_id, actor, reason, str(exc))
        except Exception as exc:
            # A broker that is down raises its own errors; the operator gets them as an
            # outcome on the page and in the audit trail, not as a server error.
            logger.exception("replay of dead letter %s failed", record_id)
            detail = f"failed: {type(exc).__name__}: {exc}"
            self.store.audit(record_id, "replay", actor=actor, reason=reason, outcome=detail)
            return ReplayOutcome(record_id, "failed", detail)
        detail = str(getattr(result, "outcome", result))
        if len(self.store.audit_log(record_id)) == before:
            self.store.audit(record_id, "replay", actor=actor, reason=reason, outcome=detail)
        return ReplayOutcome(record_id, "sent", detail, getattr(result, "task_id", None))

    def _refuse(self, record_id: str, actor: str, reason: str, why: str) -> ReplayOutcome:
        self.store.audit(
            record_id, "replay", actor=actor, reason=reason or "", outcome=f"refused: {why}"
        )
        return ReplayOutcome(record_id, "refused", why)

    def _task_replayer(self) -> Callable[..., Any]:
        if self._replay_task is None:
            from xsm_celery.celery.deadletter.replay import replay_task

            self._replay_task = replay_task
        return self._replay_task

    def resolve(self, record_id: str, *, actor: str, reason: str) -> bool:
        """Mark a record resolved without replaying it; False if it is missing or resolved."""
        record = self.store.get(record_id)
        if record is None or record.resolved_at is not None:
            return False
        self.store.mark_resolved(record_id)
        self.store.audit(record_id, "resolve", actor=actor, reason=reason, outcome="resolved")
        return True

    def purge(self, record_id: str, *, actor: str, reason: str) -> bool:
        """Delete a record (its audit trail stays); False if it did not exist."""
        if not self.store.delete(record_id):
            return False
        self.store.audit(record_id, "purge", actor=actor, reason=reason, outcome="deleted")
        return True
