"""``ChartTask``: a Celery task whose retries, give-up and dead letter a statechart decides.

::

    @app.task(base=ChartTask, retry_policy=RetryPolicy(max_attempts=5, base_ms=500),
              give_up_on=(ValueError,))
    def charge(order_id, amount): ...

Each run is one ``attempting`` step of the task's retry chart (``charts/task_retry.json``
unless ``retry_chart=`` names another). A failure becomes ``Task.retry(countdown=ms / 1000)``
with the chart's snapshot in the ``xsm_chart`` message header, so the next run, on any
worker, continues the same chart under the same task id. Giving up writes one ``DeadLetter``
and ends the task in ``FAILURE`` with the function's last exception.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import weakref
from typing import Any, ClassVar

from celery import Task, signals
from celery.exceptions import Ignore, Reject, Retry

from xsm_celery.celery.fleet.admission import run_admitted, run_breaker_guarded
from xsm_celery.celery.fleet.plan import fleet_plan
from xsm_celery.celery.serialization import require_json
from xsm_celery.celery.settings import read_settings
from xsm_celery.celery.task.charts import ChartSpec
from xsm_celery.celery.task.execute import Bound, execute
from xsm_celery.celery.task.header import UNSIGNED_WARNING, HeaderCodec, signing_key
from xsm_celery.celery.task.machine import build_task_machine, first_attempt
from xsm_celery.celery.task.tracer import rebuilt_tracer
from xsm_celery.engine import Machine, MachineLogic
from xsm_celery.errors import ConfigurationError, WorkerLost
from xsm_celery.patterns import RetryPolicy
from xsm_celery.patterns.retry import ExceptionTypes

__all__ = ["CONTROL_EXCEPTIONS", "ChartTask", "REFUSED_OPTIONS", "warn_if_unsigned"]

logger = logging.getLogger(__name__)

#: Celery's control-flow exceptions: raised by a task to steer Celery, never a failure.
CONTROL_EXCEPTIONS: tuple[type[BaseException], ...] = (Retry, Ignore, Reject)

#: Celery retry options that would run a second retry loop beside the chart.
REFUSED_OPTIONS = (
    "autoretry_for",
    "dont_autoretry_for",
    "retry_kwargs",
    "retry_backoff",
    "retry_backoff_max",
    "retry_jitter",
    "max_retries",
    "default_retry_delay",
)


class ChartTask(Task):  # type: ignore[type-arg]
    """A Celery task retried by a chart (see the module docstring).

    Options (keyword arguments of ``@app.task`` or class attributes):
        retry_policy: The ``RetryPolicy`` (attempts, backoff, jitter); a default one if None.
        give_up_on: Exception classes that dead-letter at once, without another attempt.
        retry_on: Exception classes worth retrying (default: all); others dead-letter at
            once. A lost worker is always retried unless ``give_up_on`` names ``WorkerLost``.
        retry_chart: A chart dict, a JSON file path or a shipped chart's name.
        chart_logic: Extra ``MachineLogic`` a custom chart needs.
        fleet_rate_limit: A fleet-wide rate (``"20/s"`` or ``RateLimit(...)``).
        fleet_concurrency: Fleet-wide slots (``3``, ``Concurrency(...)`` or ``AIMD(...)``).
        breaker: The name of a fleet-wide circuit breaker (``app.conf.xsm_breakers``).
            See ``xsm_celery.celery.fleet.admission``: a task over a limit is deferred, not failed.

    Celery's own options keep their meaning (``acks_late``, ``Reject``, ``Ignore``, signals,
    ``on_failure``). Late acknowledgement is the default here, and requeueing when the
    worker is lost, so a crashed attempt comes back and is counted. Celery's own retry
    options (``autoretry_for``, ``max_retries``, ...) are refused.
    """

    retry_policy: RetryPolicy | None = None
    give_up_on: ExceptionTypes = ()
    retry_on: ExceptionTypes | None = None
    retry_chart: ChartSpec = None
    chart_logic: MachineLogic | None = None
    fleet_rate_limit: Any = None
    fleet_concurrency: Any = None
    breaker: str | None = None
    acks_late = True
    reject_on_worker_lost = True
    #: A hard time limit requeues the message (see ``time_limits``), counted as a lost attempt.
    acks_on_timeout = False
    Request = "xsm_celery.celery.task.time_limits:ChartTaskRequest"
    max_retries = None
    _xsm_bound: ClassVar[Bound | None] = None
    _xsm_fleet: ClassVar[tuple[Any, Any] | None] = None

    @classmethod
    def on_bound(cls, app: Any) -> None:
        """Check the configuration and build the chart when Celery binds the task."""
        super().on_bound(app)
        if not cls.__dict__.get("name"):
            return
        cls._xsm_bound = _bind(cls, app)

    def __setattr__(self, name: str, value: Any) -> None:
        """Keep the worker's tracer rebuilt to record the chart's retries cheaply.

        Celery's worker assigns ``task.__trace__`` when it starts (see ``tracer``). A hook on
        the assignment, not a descriptor, so that reading the tracer (once per delivery) is
        a plain attribute lookup.
        """
        if name == "__trace__" and value is not None:
            value = rebuilt_tracer(self, value)
        super().__setattr__(name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run one chart step, or the plain function when called directly (``task(...)``)."""
        request = self.request
        if request.called_directly:
            return self.run(*args, **kwargs)
        bound = type(self)._xsm_bound
        if bound is None or bound.app is not self.app:
            bound = type(self)._xsm_bound = _bind(type(self), self.app)
        fleet = type(self)._xsm_fleet
        if fleet is None or fleet[0] is not self.app:
            fleet = type(self)._xsm_fleet = (self.app, fleet_plan(type(self), self.app))
        plan = fleet[1]
        if plan is None or request.is_eager:
            return execute(self, bound, args, kwargs, request)
        if plan.breaker_only:
            return run_breaker_guarded(self, plan, bound, args, kwargs, request, body=execute)
        return run_admitted(self, plan, bound, args, kwargs, request, body=execute)


def _bind(cls: type[ChartTask], app: Any) -> Bound:
    name = str(cls.name)
    _refuse_retry_options(cls, name)
    require_json(app.conf, task_name=name, task_serializer=cls.serializer)
    settings = read_settings(app)
    fleet_plan(cls, app)
    policy = _effective_policy(cls, name)
    keys = _redact_keys(settings.redact_keys)
    machine = build_task_machine(
        name,
        cls.retry_chart,
        policy,
        control=CONTROL_EXCEPTIONS,
        chart_logic=cls.chart_logic,
        redact_keys=keys,
    )
    codec = HeaderCodec.for_task(name, machine, policy, signing_key(app.conf))
    return Bound(
        app=app,
        machine=machine,
        policy=policy,
        codec=codec,
        settings=settings,
        signature=_signature(cls),
        redact_keys=keys,
        first=first_attempt(
            name,
            machine,
            CONTROL_EXCEPTIONS,
            shipped=cls.retry_chart is None and cls.chart_logic is None,
            attempt_key=codec.attempt_key,
            probe=_probe_machine(name, policy, keys),
        ),
    )


def _probe_machine(name: str, policy: RetryPolicy, keys: tuple[str, ...] | None) -> Machine | None:
    """The shipped chart under ``policy`` with a fixed jitter source, for ``first_attempt``.

    None when the policy has ``abort_if`` or ``retry_if``: the user's predicates are not
    called with a made-up failure while the task is being bound.
    """
    if policy.abort_if is not None or policy.retry_if is not None:
        return None
    fixed = dataclasses.replace(policy, rng=_half)
    return build_task_machine(name, None, fixed, control=CONTROL_EXCEPTIONS, redact_keys=keys)


def _half() -> float:
    return 0.5


def _refuse_retry_options(cls: type[ChartTask], name: str) -> None:
    for option in REFUSED_OPTIONS:
        value = getattr(cls, option, None)
        if option == "default_retry_delay" and value == Task.default_retry_delay:
            continue
        if value not in (None, (), [], False):
            raise ConfigurationError(
                f"task {name!r} is a ChartTask but sets Celery's {option}={value!r}; the retry "
                "chart already retries it, so remove the option and use retry_policy="
                "RetryPolicy(...), give_up_on=... or retry_on=... instead"
            )


def _effective_policy(cls: type[ChartTask], name: str) -> RetryPolicy:
    policy = cls.retry_policy if cls.retry_policy is not None else RetryPolicy()
    if not isinstance(policy, RetryPolicy):
        raise ConfigurationError(
            f"task {name!r}: retry_policy must be a RetryPolicy, got {type(policy).__name__}"
        )
    give_up = _types(cls.give_up_on)
    retry_on = _types(cls.retry_on) if cls.retry_on is not None else None
    if not give_up and retry_on is None:
        return policy
    return RetryPolicy(
        max_attempts=policy.max_attempts,
        base_ms=policy.base_ms,
        factor=policy.factor,
        max_ms=policy.max_ms,
        jitter=policy.jitter,
        rng=policy.rng,
        retry_on=(*retry_on, WorkerLost) if retry_on is not None else policy.retry_on,
        give_up_on=(*policy.give_up_on, *give_up),
        abort_if=policy.abort_if,
        retry_if=policy.retry_if,
        retry_on_result=policy.retry_on_result,
    )


def _types(value: ExceptionTypes | None) -> tuple[type[BaseException], ...]:
    if value is None:
        return ()
    return value if isinstance(value, tuple) else (value,)


def _redact_keys(extra: tuple[str, ...]) -> tuple[str, ...] | None:
    if not extra:
        return None
    from xsm_celery.engine.redact import DEFAULT_REDACT_KEYS

    return (*DEFAULT_REDACT_KEYS, *extra)


def _signature(cls: type[ChartTask]) -> inspect.Signature | None:
    """The function's signature as callers see it (without ``self`` for a bound task)."""
    raw = next((k.__dict__["run"] for k in cls.__mro__ if "run" in k.__dict__), None)
    try:
        signature = inspect.signature(cls.run)
    except (TypeError, ValueError):
        return None
    params = list(signature.parameters.values())
    if not isinstance(raw, staticmethod) and params:
        params = params[1:]
    return signature.replace(parameters=params)


_warned: weakref.WeakSet[Any] = weakref.WeakSet()


@signals.worker_ready.connect
def _warn_unsigned_headers(sender: Any = None, **_: Any) -> None:
    """Say at worker start, once, that this worker's chart headers go unsigned.

    ``worker_ready`` is sent in the worker's main process, after its logging is set up and
    never in a pool child, so the warning is in the worker's log once, not once per task.
    """
    app = getattr(sender, "app", None)
    if app is not None:
        warn_if_unsigned(app)


def warn_if_unsigned(app: Any) -> bool:
    """Log ``UNSIGNED_WARNING`` if ``app`` runs chart tasks with no signing key; once per app.

    Returns True when it warned. An app without chart tasks has no header to sign, and one
    with a key (``xsm_signing_key`` or Django's ``SECRET_KEY``) signs them: both stay quiet.
    """
    if app in _warned:
        return False
    _warned.add(app)
    if signing_key(app.conf) is not None or not _has_chart_tasks(app):
        return False
    logger.warning(UNSIGNED_WARNING)
    return True


def _has_chart_tasks(app: Any) -> bool:
    return any(isinstance(task, ChartTask) for task in list(app.tasks.values()))
