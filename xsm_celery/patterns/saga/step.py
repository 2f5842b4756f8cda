"""``SagaStep``: one declared step of a saga, the record the builder, chart and logic share.

It sits in its own module so that the chart and the logic can read steps without importing
the builder that creates them: the builder imports both, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass

from xsm_celery.patterns.retry import RetryPolicy

__all__ = ["SagaStep"]


@dataclass(frozen=True)
class SagaStep:
    """One declared step: its service, its compensation, its timeout and its retry policy.

    Attributes:
        name: The state key under ``steps`` (and ``compensating``); a Python identifier.
        invoke: The service key the step invokes (looked up in ``MachineLogic.services``).
        compensate: The service key that undoes the step, or ``None`` when nothing to undo.
        timeout_ms: Milliseconds before the step counts as failed, or ``None`` for no limit.
        retry: The policy that re-runs a failed step, or ``None`` to compensate at once.
    """

    name: str
    invoke: str
    compensate: str | None = None
    timeout_ms: int | None = None
    retry: RetryPolicy | None = None
