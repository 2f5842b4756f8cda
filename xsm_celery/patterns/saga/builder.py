"""``SagaBuilder``: an orchestrated saga declared step by step, generated as plain chart JSON.

Nothing is interpreted at run time: ``build()`` returns an ordinary chart (editable in
Stately, ``strict_config``-clean) and ``logic()`` the handful of generic actions, guards and
delays it names. The saga then runs, persists, dead-letters and publishes like any other
machine, in a ``SyncInterpreter``, behind an ``InboundDispatcher`` or as a Celery workflow.
Everything a declaration can get wrong is refused here, with the fix in the message, rather
than emitted as JSON that fails later. See docs/sagas.md for the generated shape.
"""

from __future__ import annotations

import keyword
from typing import Any

from xsm_celery.checks import positive_int
from xsm_celery.engine import MachineLogic, is_engine_event_type
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns.retry import RetryPolicy
from xsm_celery.patterns.saga.chart import retrying_state_name, saga_chart
from xsm_celery.patterns.saga.logic import saga_logic
from xsm_celery.patterns.saga.step import SagaStep

__all__ = ["SagaBuilder"]


def _check_identifier(what: str, value: object) -> str:
    if not isinstance(value, str) or not value.isidentifier() or keyword.iskeyword(value):
        raise ConfigurationError(
            f"{what} {value!r} must be an identifier (letters, digits, '_'), because it is a "
            "state key of the generated chart; use e.g. 'reserve_stock', not 'reserve-stock'"
        )
    return value


def _check_key(what: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(
            f"{what} must be a non-empty string naming a key of MachineLogic, got {value!r}"
        )
    return value


def _check_timeout(value: object) -> int | None:
    if value is None:
        return None
    return positive_int("timeout_ms", value, advice="give milliseconds (timeout_ms=5000) or None")


def _check_start_event(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or value == "*":
        raise ConfigurationError(
            f"start_event must be a plain event name such as 'START', got {value!r}"
        )
    if is_engine_event_type(value):
        raise ConfigurationError(
            f"start_event {value!r} is an engine-reserved event name (done.invoke.*, "
            "error.platform.*, after.*, ...); use a plain event name such as 'START'"
        )
    return value


class SagaBuilder:
    """Declare a saga fluently, then generate its chart and logic.

    ``.step()`` appends a step and ``.on_failure()`` names actions run when the saga ends
    failed; both return the builder so the declaration reads as one expression.

    Args:
        name: The chart id, and the prefix of every published event type
            (``<name>.<step>.completed``); an identifier.
        start_event: With ``None`` the saga starts running when the interpreter starts;
            with a name (``"START"``) it waits in ``idle`` for that event, whose payload is
            copied into ``context["input"]``.

    Raises:
        ValueError: A name, key, timeout, policy or start event the builder refuses; the
            message says what to pass instead.
    """

    def __init__(self, name: str, *, start_event: str | None = None) -> None:
        self.name = _check_identifier("saga name", name)
        self.start_event = _check_start_event(start_event)
        self._steps: list[SagaStep] = []
        self._on_failure: list[str] = []

    @property
    def steps(self) -> tuple[SagaStep, ...]:
        """The declared steps, in order."""
        return tuple(self._steps)

    @property
    def failure_actions(self) -> tuple[str, ...]:
        """The action names run on entering ``failed`` or ``compensationFailed``."""
        return tuple(self._on_failure)

    def step(
        self,
        name: str,
        *,
        invoke: str,
        compensate: str | None = None,
        timeout_ms: int | None = None,
        retry: RetryPolicy | None = None,
    ) -> SagaBuilder:
        """Append a step that invokes ``invoke`` and is undone by ``compensate``.

        Raises:
            ValueError: The name is not an identifier, is used twice, or collides with the
                ``<step>Retrying`` state of a step with ``retry=``; ``invoke`` or
                ``compensate`` is empty; ``timeout_ms`` is not a positive int; ``retry`` is
                not a ``RetryPolicy``.
        """
        _check_identifier("step name", name)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError(
                f"retry must be a RetryPolicy (e.g. retry=RetryPolicy(max_attempts=3)) or "
                f"None, got {type(retry).__name__}"
            )
        candidate = SagaStep(
            name=name,
            invoke=_check_key("invoke", invoke),
            compensate=None if compensate is None else _check_key("compensate", compensate),
            timeout_ms=_check_timeout(timeout_ms),
            retry=retry,
        )
        self._check_collisions(candidate)
        self._steps.append(candidate)
        return self

    def _check_collisions(self, candidate: SagaStep) -> None:
        for existing in self._steps:
            if existing.name == candidate.name:
                raise ConfigurationError(
                    f"duplicate step {candidate.name!r} in saga {self.name!r}; "
                    "every step needs its own name"
                )
            for owner, other in ((existing, candidate), (candidate, existing)):
                if owner.retry is not None and other.name == retrying_state_name(owner.name):
                    raise ConfigurationError(
                        f"step name {other.name!r} collides with step '{owner.name}Retrying', "
                        f"the state a retry= step owns; rename step {other.name!r}"
                    )

    def on_failure(self, *actions: str) -> SagaBuilder:
        """Run ``actions`` (MachineLogic action names) when the saga ends failed.

        They run on entry to ``failed`` and to ``compensationFailed``, the two outcomes an
        operator may have to hear about.
        """
        if not actions:
            raise ConfigurationError(
                "on_failure() needs at least one action name, e.g. 'notifyOps'"
            )
        for action in actions:
            self._on_failure.append(_check_key("on_failure action", action))
        return self

    def build(self) -> dict[str, Any]:
        """Return the saga's chart as a new JSON-ready dict.

        Raises:
            ValueError: No step was declared.
        """
        if not self._steps:
            raise ConfigurationError(
                f"a saga needs at least one step; call .step(...) on SagaBuilder({self.name!r}) "
                "before build()"
            )
        return saga_chart(self.name, self.steps, self.start_event, self.failure_actions)

    def logic(self) -> MachineLogic:
        """Return the generic actions, guards and delays the generated chart names.

        Merge your services (and ``on_failure`` actions) on top:
        ``saga.logic().merge(MachineLogic(services={...}))``.
        """
        return saga_logic(self.name, self.steps)

    def __repr__(self) -> str:
        names = ", ".join(step.name for step in self._steps)
        return f"SagaBuilder({self.name!r}, steps=[{names}])"
