"""Every exception xsm_celery raises, grouped by the phase that raises it.

Catch ``XsmError`` (also importable as ``XStateMachineError``, the name the specification
uses) to catch everything the library raises on purpose. The tree::

    * XsmError  (alias XStateMachineError)
      - ChartError: a chart refused at create_machine(); the message names the node path
        - InvalidConfigError
        - StateNotFoundError
        - ImplementationMissingError
      - ExecutionError: raised while a machine runs
        - InterpreterStoppedError
        - RunawayChainError
        - ChoreographyUnsettledError (also a RuntimeError): run_until_quiet hit max_rounds
        - NotSupportedError
        - InvalidEventError (also a TypeError): send() got something that is not an event
        - WorkerLost: a task delivery whose worker died mid-attempt
        - TaskGaveUp: a task chart reached its dead-letter state without an error
        - WorkflowStepError: a workflow step failed (an action raised, a bad message);
          nothing of the step was saved
        - ServiceTaskFailed: a Celery task a workflow invoked failed (``error.platform``)
        - SnapshotError: a snapshot that cannot be restored
          - SnapshotCorruptError
          - SnapshotTooLargeError
          - SnapshotMismatchError
      - PolicyError: a resilience pattern refused the call
        - CircuitOpenError
      - StoreError: a store failed or refused a write
        - ConflictError
        - LockTimeoutError
        - StoreUnavailableError
      - EnvelopeError: an inbound envelope is unusable
        - EnvelopeCorruptError
        - EnvelopeTooLargeError
      - BrokerError
        - BrokerPublishError
      - ReplayRefusedError
      - ConfigurationError: a setting or option that cannot work
      - MissingExtraError (also an ImportError)

Messages say what happened, the offending value, and what to do; the same data is kept
on attributes so callers never parse a message.
"""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "BrokerPublishError",
    "ChartError",
    "ChoreographyUnsettledError",
    "CircuitOpenError",
    "ConfigurationError",
    "ConflictError",
    "EnvelopeCorruptError",
    "EnvelopeError",
    "EnvelopeTooLargeError",
    "ExecutionError",
    "ImplementationMissingError",
    "InterpreterStoppedError",
    "InvalidConfigError",
    "InvalidEventError",
    "LockTimeoutError",
    "MissingExtraError",
    "NotSupportedError",
    "PolicyError",
    "ReplayRefusedError",
    "RunawayChainError",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotMismatchError",
    "SnapshotTooLargeError",
    "StateNotFoundError",
    "StoreError",
    "StoreUnavailableError",
    "ServiceTaskFailed",
    "TaskGaveUp",
    "WorkerLost",
    "WorkflowStepError",
    "XStateMachineError",
    "XsmError",
]


class XsmError(Exception):
    """Base of every exception xsm_celery raises on purpose."""


#: The specification's name for the base class; the same object as ``XsmError``.
XStateMachineError = XsmError


class ChartError(XsmError):
    """Raised when a chart or its logic is refused before anything runs."""


class InvalidConfigError(ChartError):
    """Raised when a chart's JSON is not a valid statechart.

    ``path`` is the dotted location of the bad node (``states.retrying.after``) so the
    message can be acted on without reading the whole chart.
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class StateNotFoundError(ChartError):
    """Raised when a transition target or a ``matches()`` argument names no state."""

    def __init__(self, target: str, *, reference_id: str = "", path: str = "") -> None:
        self.target = target
        self.reference_id = reference_id
        self.path = path
        where = f"{path}: " if path else ""
        origin = f" (resolved from '{reference_id}')" if reference_id else ""
        super().__init__(
            f"{where}target '{target}'{origin} names no state; use a sibling key, "
            "a '#id', or a dotted path below the machine"
        )


class ImplementationMissingError(ChartError):
    """Raised when a chart names an action, guard, service or delay the logic lacks."""

    def __init__(self, kind: str, name: str, *, path: str = "") -> None:
        self.kind = kind
        self.name = name
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(
            f"{where}unknown {kind} '{name}'; add it to MachineLogic({kind}s={{'{name}': ...}})"
        )


class ExecutionError(XsmError):
    """Raised while a machine runs."""


class InterpreterStoppedError(ExecutionError):
    """Raised when an interpreter (or a breaker built on one) is used after stop()."""


class RunawayChainError(ExecutionError):
    """Raised when eventless (``always``) transitions or raised events never settle.

    ``limit`` is the number of microsteps allowed before the chain is declared runaway.
    """

    def __init__(self, message: str, *, limit: int = 0) -> None:
        self.limit = limit
        super().__init__(message)


class ChoreographyUnsettledError(ExecutionError, RuntimeError):
    """Raised when ``ChoreographyRouter.run_until_quiet`` is still busy after ``max_rounds``.

    Two routes publishing at each other forever is a loop no single machine can see (the
    engine's ``RunawayChainError`` guards one machine's chain); ``rounds`` is the limit hit.
    """

    def __init__(self, message: str, *, rounds: int) -> None:
        self.rounds = rounds
        super().__init__(message)


class NotSupportedError(ExecutionError):
    """Raised when a chart uses a feature this engine deliberately does not run."""


class InvalidEventError(ExecutionError, TypeError):
    """Raised when ``send()`` is given something that is not an event (no ``type``, not a str).

    It is also a ``TypeError``: passing the wrong kind of value is a programming error.
    """


class TaskGaveUp(ExecutionError):
    """Raised as a chart task's failure when its chart gave up although nothing failed.

    Only a custom chart can do that (a dead-letter state reached from ``onDone``); the
    dead letter is written all the same, and this is the exception the task ends with.
    """


class WorkflowStepError(ExecutionError):
    """Raised when a workflow step cannot be applied; the transaction was rolled back.

    Its ``__cause__`` is the action's or guard's own exception. The step task retries it by
    the workflow's ``retry_policy`` and then writes a dead letter.
    """


class ServiceTaskFailed(ExecutionError):
    """The ``event.data`` of ``error.platform.<id>`` when a Celery task step failed.

    Attributes:
        task_name: The task that failed.
        error_type: The name of its exception's class.
        message: Its message (as the worker reported it).
    """

    def __init__(self, task_name: str, error_type: str, message: str) -> None:
        self.task_name = task_name
        self.error_type = error_type
        self.message = message
        super().__init__(f"task {task_name or '?'} failed with {error_type}: {message}")


class WorkerLost(ExecutionError):
    """Recorded when a task message comes back because the worker running it died.

    It is never raised to user code: the chart task feeds it to the retry chart as the
    failure of the attempt that was lost, so it appears in the dead letter's error chain.
    """


class SnapshotError(ExecutionError):
    """Raised when a snapshot cannot be restored."""


class SnapshotCorruptError(SnapshotError):
    """Raised when a snapshot is not JSON or lacks a field it must have."""


class SnapshotTooLargeError(SnapshotError):
    """Raised when a serialised snapshot is over the size cap, checked before parsing."""


class SnapshotMismatchError(SnapshotError):
    """Raised when a snapshot was taken from a chart whose structure has changed."""


class PolicyError(XsmError):
    """Raised when a resilience pattern refuses a call."""


class CircuitOpenError(PolicyError):
    """Raised when a circuit breaker rejects a call; the target was not invoked.

    ``state`` is ``"open"`` or ``"half_open"`` (every probe slot taken); ``name`` is the
    breaker's name; ``retry_after_ms`` is the time left in the cooldown, if known.
    """

    def __init__(
        self, name: str, state: str = "open", *, retry_after_ms: float | None = None
    ) -> None:
        self.name = name
        self.state = state
        self.retry_after_ms = retry_after_ms
        detail = "half-open and every probe slot is taken" if state == "half_open" else "open"
        wait = f"; retry in {retry_after_ms:.0f} ms" if retry_after_ms is not None else ""
        super().__init__(
            f"Circuit '{name}' is {detail}; call rejected without running the target{wait}"
        )


class StoreError(XsmError):
    """Raised when a store fails; ``except StoreError`` covers the whole persistence layer."""


class ConflictError(StoreError):
    """Raised when an optimistic save finds another writer saved first; reload and retry."""


class LockTimeoutError(StoreError):
    """Raised when a pessimistic lock is not acquired in time."""


class StoreUnavailableError(StoreError):
    """Raised when a store's backing service cannot be reached."""


class EnvelopeError(XsmError):
    """Raised when an inbound envelope cannot be used."""


class EnvelopeCorruptError(EnvelopeError):
    """Raised when an envelope is not JSON or breaks the CloudEvents shape."""


class EnvelopeTooLargeError(EnvelopeError):
    """Raised when an envelope is over the byte cap, checked before it is parsed."""


class BrokerError(XsmError):
    """Raised when a broker adapter fails."""


class BrokerPublishError(BrokerError):
    """Raised when a publish was not accepted; the outbox keeps the row."""


class ReplayRefusedError(XsmError):
    """Raised when a dead-letter replay is refused (changed chart, no reason, no envelope)."""


class ConfigurationError(XsmError):
    """Raised when a setting or option cannot work; the message names the fix."""


class MissingExtraError(XsmError, ImportError):
    """Raised when an optional integration is used without its pip extra.

    It is also an ``ImportError`` so existing ``except ImportError`` fallbacks keep working.
    """

    def __init__(self, extra: str, module: str, *, hint: str = "") -> None:
        self.extra = extra
        self.module = module
        message = f"'{module}' is not installed; run: pip install \"xsm-celery[{extra}]\""
        if hint:
            message = f"{message} ({hint})"
        super().__init__(message, name=module)
