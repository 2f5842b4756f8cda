"""The facts one chart-task run reports: attempt started and finished, with its outcome.

Kept apart from ``execute`` so the run path reads as the decision it carries out. Nothing
here is computed unless someone subscribed to ``xsm_celery.hooks``: a worker without an
exporter pays one look at the subscriber list per run. Fields are bounded (task name, attempt
number, outcome, exception type name); the task's arguments never appear.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.hooks import FactKind, emit, subscribers, wants

__all__ = ["TRACEPARENT", "AttemptFacts", "outcome_label"]

#: The W3C trace-context header a traced producer puts on a task message.
TRACEPARENT = "traceparent"

_LABELS = {"done": "succeeded", "give_up": "gave_up", "retry": "retry", "control": "control"}


def outcome_label(kind: str | None) -> str:
    """The stable outcome name of a run: succeeded, retry, gave_up, control or error."""
    return _LABELS.get(kind or "", "error")


@dataclass
class AttemptFacts:
    """Reports one run as ``ATTEMPT_STARTED`` then ``ATTEMPT_FINISHED``."""

    task: str
    attempt: int
    started: float = field(default_factory=time.perf_counter)
    kind: str | None = None
    exception: str | None = None

    @classmethod
    def start(cls, task: Any, attempt: int, request: Any = None) -> AttemptFacts | None:
        """Emit ``ATTEMPT_STARTED`` for ``task``'s run, or return None when nobody listens.

        ``attempt`` is the one the checked header gives (1 without one, or when it was
        rejected and the chart starts afresh), so the header is parsed once per run.
        ``request`` is ``task.request``, when the caller has it already.
        """
        # No subscriber at all is the common case: one call, no hashing of the kinds.
        if not subscribers() or not (
            wants(FactKind.ATTEMPT_STARTED) or wants(FactKind.ATTEMPT_FINISHED)
        ):
            return None
        if request is None:
            request = task.request
        facts = cls(str(task.name), attempt)
        emit(
            FactKind.ATTEMPT_STARTED,
            task=facts.task,
            attempt=facts.attempt,
            traceparent=_traceparent(request),
            eager=bool(request.is_eager),
        )
        return facts

    def settled(self, kind: str, error: BaseException | None) -> None:
        """Note where the chart settled, before the retry or dead letter is carried out."""
        self.kind = kind
        self.exception = type(error).__name__ if error is not None else None

    def finish(self) -> None:
        """Emit ``ATTEMPT_FINISHED`` with the outcome and the run's duration."""
        emit(
            FactKind.ATTEMPT_FINISHED,
            task=self.task,
            attempt=self.attempt,
            outcome=outcome_label(self.kind),
            exception=self.exception,
            duration_s=time.perf_counter() - self.started,
        )


def _traceparent(request: Any) -> str | None:
    headers = request.headers
    # Celery's request headers are a dict (or None); the ABC check is for anything else.
    if type(headers) is not dict and not isinstance(headers, Mapping):
        headers = {}
    value = headers.get(TRACEPARENT) or getattr(request, TRACEPARENT, None)
    return value if isinstance(value, str) else None
