"""Every exception xsm_celery raises, grouped by the phase that raises it.

Catch ``XsmError`` (also importable as ``XStateMachineError``, the name the specification
uses) to catch everything the library raises on purpose. The tree::

    * XsmError  (alias XStateMachineError)
      - ChartError: a chart refused at create_machine(); the message names the node path
        - InvalidConfigError
        - StateNotFoundError
        - ImplementationMissingError
        - NotSupportedError: a feature this engine does not run (history); names the path
      - ExecutionError: raised while a machine runs
        - InterpreterStoppedError
        - RunawayChainError
        - ExplorationLimitError: the graph tools found more configurations than max_configs
        - ChoreographyUnsettledError (also a RuntimeError): run_until_quiet hit max_rounds
        - AsyncServiceError: SyncInterpreter was handed an async service or action
        - ContextValidationError: the context failed the machine's context model after a step
        - InvalidEventError (also a TypeError): send() got something that is not an event
        - WorkerLost: a task delivery whose worker died mid-attempt
          - TimeLimitKilled: ... killed by Celery's hard time_limit
        - TaskGaveUp: a task chart reached its dead-letter state without an error
        - MisuseError (also a RuntimeError): an API called out of order
        - WaitTimeoutError (also a TimeoutError): wait_for's condition was not met
        - WorkflowStepError: a workflow step failed (an action raised, a bad message);
          nothing of the step was saved
        - ServiceTaskFailed: a Celery task a workflow invoked failed (``error.platform``)
        - SnapshotError: a snapshot that cannot be restored
          - SnapshotCorruptError
          - SnapshotTooLargeError
          - SnapshotMismatchError
      - PolicyError: a resilience pattern refused the call
        - CircuitOpenError
        - RateLimitExceededError: a rate limiter refused or timed out
        - BulkheadRejectedError: every slot and queue place of a bulkhead is taken
        - DeadlineExceededError (also a TimeoutError): a call ran past its timeout
        - RetryExhaustedError: an in-process retry loop ran out of attempts
        - IdempotencyInProgressError: the same idempotency key is running elsewhere
        - DeferredTooLongError: a fleet-limited task deferred past its bound
      - StoreError: a store failed or refused a write
        - ConflictError
        - LockTimeoutError
        - StoreUnavailableError
      - EnvelopeError: an inbound envelope is unusable
        - EnvelopeCorruptError
        - EnvelopeTooLargeError
      - BrokerError
        - BrokerPublishError: the broker (or adapter) refused one message; counted
          - BrokerUnavailableError: the broker is down or unreachable; retried, not counted
      - ReplayRefusedError
      - ConfigurationError (also a ValueError): a setting, option or argument that cannot work
        - ArgumentTypeError (also a TypeError): one of the wrong type
        - UnknownNameError (also a KeyError): a name that names nothing known
      - MissingExtraError (also an ImportError)

Messages say what happened, the offending value, and what to do; the same data is kept
on attributes so callers never parse a message.
"""

from __future__ import annotations

__all__ = [
    "ArgumentTypeError",
    "MisuseError",
    "UnknownNameError",
    "WaitTimeoutError",
    "AsyncServiceError",
    "BrokerError",
    "BrokerPublishError",
    "BrokerUnavailableError",
    "BulkheadRejectedError",
    "ChartError",
    "ChoreographyUnsettledError",
    "CircuitOpenError",
    "ConfigurationError",
    "ConflictError",
    "DeadlineExceededError",
    "DeferredTooLongError",
    "ContextValidationError",
    "EnvelopeCorruptError",
    "EnvelopeError",
    "EnvelopeTooLargeError",
    "ExecutionError",
    "ExplorationLimitError",
    "IdempotencyInProgressError",
    "ImplementationMissingError",
    "InterpreterStoppedError",
    "InvalidConfigError",
    "InvalidEventError",
    "LockTimeoutError",
    "MissingExtraError",
    "NotSupportedError",
    "PolicyError",
    "RateLimitExceededError",
    "ReplayRefusedError",
    "RetryExhaustedError",
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
    "TimeLimitKilled",
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

    def __init__(
        self,
        kind: str,
        name: str,
        *,
        path: str = "",
        missing: tuple[tuple[str, str, str], ...] = (),
    ) -> None:
        self.kind = kind
        self.name = name
        self.path = path
        #: Every missing ``(kind, name, path)`` when several were found at once (strict mode).
        self.missing = missing or ((kind, name, path),)
        where = f"{path}: " if path else ""
        message = (
            f"{where}unknown {kind} '{name}'; add it to MachineLogic({kind}s={{'{name}': ...}})"
        )
        if len(self.missing) > 1:
            listed = "; ".join(f"{p or '<root>'}: {k} '{n}'" for k, n, p in self.missing)
            kinds = sorted({k for k, _, _ in self.missing})
            message = (
                f"{len(self.missing)} implementations are missing: {listed}; add them to "
                f"MachineLogic({', '.join(f'{k}s=' for k in kinds)}...)"
            )
        super().__init__(message)


class NotSupportedError(ChartError):
    """Raised by ``create_machine()`` when a chart uses a feature this engine does not run.

    ``path`` is the dotted location of the node that uses it (``states.form.type``).
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


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


class ExplorationLimitError(ExecutionError):
    """Raised when the graph tools find more configurations than ``max_configs`` allows.

    ``limit`` is that bound. Parallel regions multiply configurations, so raise the bound,
    pass ``max_configs=None``, or explore a smaller chart (one region at a time).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"the chart has more than {limit} configurations; pass a larger max_configs= "
            "(or None for no bound), or lower max_depth="
        )


class ChoreographyUnsettledError(ExecutionError, RuntimeError):
    """Raised when ``ChoreographyRouter.run_until_quiet`` is still busy after ``max_rounds``.

    Two routes publishing at each other forever is a loop no single machine can see (the
    engine's ``RunawayChainError`` guards one machine's chain); ``rounds`` is the limit hit.
    """

    def __init__(self, message: str, *, rounds: int) -> None:
        self.rounds = rounds
        super().__init__(message)


class AsyncServiceError(ExecutionError):
    """Raised (as the service's error) when ``SyncInterpreter`` runs an ``async`` service.

    The synchronous interpreter cannot await; the service's ``onError`` sees this error, and
    the fix is the async ``Interpreter`` or a blocking service.
    """


class ContextValidationError(ExecutionError):
    """Raised (and recorded, contained) when the context fails the machine's context model.

    ``machine_id`` names the machine; ``errors`` holds the validator's complaint as text.
    """

    def __init__(self, machine_id: str, errors: str) -> None:
        self.machine_id = machine_id
        self.errors = errors
        super().__init__(
            f"machine {machine_id!r}: context failed its model after a step: {errors}; fix "
            "the action that wrote it, or the model"
        )


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


class TimeLimitKilled(WorkerLost):
    """Recorded when a task's attempt was killed by Celery's hard ``time_limit``.

    It is a ``WorkerLost`` (the policy retries it the same way), with a reason of its own in
    the dead letter (``time_limit``), so a task that is simply too slow is told apart.
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


class RateLimitExceededError(PolicyError):
    """Raised when a rate limiter cannot admit a call in the time it was given.

    ``retry_after_s`` is when the limiter expects a token (or window room) to be free.
    """

    def __init__(self, name: str, *, retry_after_s: float) -> None:
        self.name = name
        self.retry_after_s = retry_after_s
        super().__init__(
            f"rate limit '{name}' refused the call; the target did not run; "
            f"retry in {retry_after_s:.3f} s or raise the limit"
        )


class BulkheadRejectedError(PolicyError):
    """Raised when a bulkhead has no free slot and no free queue place (or the wait timed out).

    ``max_concurrent`` and ``queue_size`` are the limits that were full.
    """

    def __init__(self, name: str, *, max_concurrent: int, queue_size: int) -> None:
        self.name = name
        self.max_concurrent = max_concurrent
        self.queue_size = queue_size
        super().__init__(
            f"bulkhead '{name}' is full ({max_concurrent} running, {queue_size} queued); "
            "the call was rejected without running; retry later, or raise max_concurrent "
            "or queue_size"
        )


class DeadlineExceededError(PolicyError, TimeoutError):
    """Raised when a call runs past its timeout or deadline.

    It is also a ``TimeoutError``, so ``except TimeoutError`` keeps working. ``timeout_s``
    is the budget the call had. A synchronous call cannot be killed: it was abandoned to
    finish on its worker thread, and its result is discarded.
    """

    def __init__(self, name: str, *, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        super().__init__(
            f"'{name}' did not finish within {timeout_s:.3f} s; raise the timeout or make "
            "the call faster"
        )


class RetryExhaustedError(PolicyError):
    """Raised when an in-process retry loop runs out of attempts.

    ``attempts`` is how many ran; ``reason`` is ``"exhausted"`` (the last attempt failed)
    or ``"result"`` (it returned a value ``retry_on_result`` still refused); ``last_error`` is the
    final exception (also the ``__cause__``), or None. A failure the policy never retries
    (``give_up_on``, ``abort_if``) is re-raised as it is, not wrapped.
    """

    def __init__(
        self, name: str, *, attempts: int, reason: str, last_error: BaseException | None
    ) -> None:
        self.name = name
        self.attempts = attempts
        self.reason = reason
        self.last_error = last_error
        cause = f": {type(last_error).__name__}: {last_error}" if last_error else ""
        super().__init__(
            f"'{name}' gave up after {attempts} attempt(s) ({reason}){cause}; fix the "
            "cause, or change the retry policy"
        )


class IdempotencyInProgressError(PolicyError):
    """Raised when a call's idempotency key is already running and has not finished.

    The first call still holds the key; this one did not run. ``retry_after_s`` is when
    that claim expires if its holder never finishes.
    """

    def __init__(self, key: str, *, retry_after_s: float) -> None:
        self.key = key
        self.retry_after_s = retry_after_s
        super().__init__(
            f"idempotency key '{key}' is already being processed; the call did not run; "
            f"retry after {retry_after_s:.1f} s to get the stored result"
        )


class DeferredTooLongError(PolicyError):
    """Raised when a task was deferred by a fleet limit or breaker for longer than allowed.

    ``reason`` is the last deferral's (``rate_limited``, ``no_slot``, ``breaker_open``,
    ``redis_down``), ``limit`` the name of the limit or breaker, ``deferrals`` the count.
    The task is dead-lettered with the reason ``deferred_too_long``.
    """

    def __init__(self, message: str, *, reason: str = "", limit: str = "", deferrals: int = 0):
        self.reason = reason
        self.limit = limit
        self.deferrals = deferrals
        super().__init__(message)


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
    """Raised when a publish was not accepted; the outbox keeps the row.

    Raised as is, it means the broker or the adapter refused that message (a negative
    confirm, a declare the broker rejects, an envelope over the size cap): retrying the
    same row fails the same way, so the relay counts it and sets the row aside after
    ``max_attempts``.
    """


class BrokerUnavailableError(BrokerPublishError):
    """Raised when the broker is down or unreachable; the relay retries without counting.

    Nothing is wrong with the message, so no row is ever set aside because of an outage.
    """


class ReplayRefusedError(XsmError):
    """Raised when a dead-letter replay is refused (changed chart, no reason, no envelope)."""


class ConfigurationError(XsmError, ValueError):
    """Raised when a setting, option or argument cannot work; the message names the fix.

    It is also a ``ValueError``: a value outside its range is a programming error, and
    ``except ValueError`` around a constructor keeps working.
    """


class ArgumentTypeError(ConfigurationError, TypeError):
    """Raised when an option or argument has the wrong type (also a ``TypeError``)."""


class UnknownNameError(ConfigurationError, KeyError):
    """Raised when a name (a breaker, a named timeout) names nothing known (also a ``KeyError``).

    ``KeyError`` quotes its argument when printed; ``__str__`` keeps the message readable.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class WaitTimeoutError(ExecutionError, TimeoutError):
    """Raised by ``Interpreter.wait_for`` when its condition is not met in time, or can no
    longer become true because the machine stopped (also a ``TimeoutError``)."""


class MisuseError(ExecutionError, RuntimeError):
    """Raised when an API is called out of order, such as a release without an acquire."""


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
