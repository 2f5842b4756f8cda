"""Prometheus metrics fed from the fact stream (``pip install 'xsm-celery[metrics]'``).

``PrometheusMetrics`` defines every ``xsm_*`` counter, histogram and gauge, and its
``handle`` method is a ``xsm_celery.hooks`` subscriber that turns each fact into increments.
``install_prometheus()`` creates one and subscribes it. Under Celery's prefork pool the
worker integration switches ``prometheus_client`` to its multiprocess mode before the pool
forks (see ``xsm_celery.metrics.server``), so the counters of every child add up on scrape.

Labels are read only from named, bounded fields (``xsm_celery.metrics.labels``); a task's
arguments, an envelope's data or a context value can never become one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from xsm_celery.errors import MissingExtraError
from xsm_celery.hooks import Fact, FactKind, subscribe
from xsm_celery.metrics.labels import OTHER, LabelGuard, field_of
from xsm_celery.metrics.states import BREAKER_STATES

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
except ImportError as exc:
    raise MissingExtraError(extra="metrics", module="prometheus_client") from exc

__all__ = [
    "BREAKER_STATES",
    "DELAY_BUCKETS",
    "DURATION_BUCKETS",
    "PrometheusMetrics",
    "install_prometheus",
]

#: Seconds buckets for attempt and step durations.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: Seconds buckets for retry delays and timer lag (which reach minutes and hours).
DELAY_BUCKETS = (0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 3600, 4 * 3600, 86_400)
#: The step messages that are completions of a task step (the others: start, event, timer).
_COMPLETION_KINDS = frozenset({"done", "error"})


class PrometheusMetrics:
    """Every ``xsm_*`` metric the fact stream feeds, and the subscriber that feeds them.

    Args:
        registry: Where the metrics register; Prometheus's default registry if None. In
            multiprocess mode the registry only owns them: the scrape reads the files.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = REGISTRY if registry is None else registry
        self.registry = reg
        self._guards: dict[str, LabelGuard] = {}
        self._children: dict[tuple[int, tuple[object, ...]], Any] = {}
        self._lock = threading.Lock()
        c, h = _factory(Counter, reg), _factory(Histogram, reg)
        self.attempts = c(
            "xsm_task_attempts", "Chart-task attempts by outcome.", ("task", "outcome")
        )
        self.attempt_seconds = h(
            "xsm_task_attempt_duration_seconds",
            "Duration of one chart-task attempt.",
            ("task",),
            buckets=DURATION_BUCKETS,
        )
        self.retries = c(
            "xsm_task_retries",
            "Retries scheduled, by task and exception type.",
            ("task", "exception"),
        )
        self.retry_delay = h(
            "xsm_task_retry_delay_seconds",
            "Delay of each scheduled retry.",
            ("task",),
            buckets=DELAY_BUCKETS,
        )
        self.gave_up = c(
            "xsm_task_gave_up", "Tasks whose retry chart gave up.", ("task", "exception")
        )
        self.dead_letters = c(
            "xsm_dead_letters", "Dead letters written, by reason.", ("source", "reason")
        )
        self.dead_letter_failures = c(
            "xsm_dead_letter_store_failures",
            "Dead letters the store refused (kept in the log only).",
            ("source",),
        )
        self.replays = c("xsm_dead_letter_replays", "Dead letters replayed.", ("source",))
        self.header_rejected = c(
            "xsm_header_rejected", "Chart headers refused as untrusted.", ("task",)
        )
        self.timers_scheduled = c("xsm_timers_scheduled", "Durable timers written.", ("purpose",))
        self.timers_fired = c("xsm_timers_fired", "Durable timers fired.", ("purpose",))
        self.timer_lag = h(
            "xsm_timer_lag_seconds",
            "Fire time minus due time of a timer.",
            ("purpose",),
            buckets=DELAY_BUCKETS,
        )
        self.relayed = c("xsm_outbox_relayed_rows", "Outbox rows published by a relay.", ("topic",))
        self.dispatch = c(
            "xsm_dispatch_outcomes",
            "Inbound envelopes by dispatcher outcome.",
            ("topic", "outcome"),
        )
        self.dispatch_seconds = h(
            "xsm_dispatch_duration_seconds",
            "Time the dispatcher spent on one envelope.",
            ("topic",),
            buckets=DURATION_BUCKETS,
        )
        self.workflow_events = c(
            "xsm_workflow_events", "Workflow events stepped, by outcome.", ("workflow", "outcome")
        )
        self.workflow_errors = c(
            "xsm_workflow_step_errors",
            "Workflow steps that failed, by exception type and what became of the step.",
            ("workflow", "exception", "outcome"),
        )
        self.workflow_transitions = c(
            "xsm_workflow_transitions",
            "Workflow state changes, by state entered.",
            ("workflow", "state"),
        )
        self.stale = c(
            "xsm_workflow_stale_completions",
            "Task-step completions that arrived after their step moved on.",
            ("workflow",),
        )
        self.stale_timers = c(
            "xsm_workflow_stale_timers",
            "Timer messages that arrived after their timer was cancelled or had fired.",
            ("workflow",),
        )
        self.breaker_transitions = c(
            "xsm_breaker_transitions", "Breaker state changes.", ("breaker", "scope", "state")
        )
        # A fleet breaker's state is read from Redis on scrape (``collector``); a
        # process-local one exists only in its processes, so the worst live one is shown.
        self.breaker_state = Gauge(
            "xsm_process_breaker_state",
            "Process-local breaker state: 0 closed, 1 half-open, 2 open (worst live process).",
            ("breaker",),
            registry=reg,
            multiprocess_mode="livemax",
        )
        self.breaker_changed = Gauge(
            "xsm_process_breaker_changed_at_seconds",
            "Epoch seconds of the latest state change of a process-local breaker.",
            ("breaker",),
            registry=reg,
            multiprocess_mode="livemax",
        )
        self.admitted = c("xsm_limit_admissions", "Calls a limiter admitted.", ("limit",))
        self.deferred = c("xsm_limit_deferrals", "Calls a limiter deferred.", ("limit",))
        self.rejected = c("xsm_limit_rejections", "Calls a limiter refused.", ("limit",))
        self.backend_down = c(
            "xsm_backend_unavailable", "Store or backend outages seen.", ("backend",)
        )
        self.facts = c("xsm_facts", "Every fact the package reported, by kind.", ("kind",))
        self._handlers = self._build_handlers()

    def handle(self, fact: Fact) -> None:
        """The ``xsm_celery.hooks`` subscriber: count ``fact``."""
        self._inc(self.facts, fact.kind.value)
        handler = self._handlers.get(fact.kind)
        if handler is not None:
            handler(fact.fields)

    def _labels(self, metric: Any, *values: object) -> Any:
        """The child of ``metric`` for ``values``, cached once its labels were admitted as is.

        The cache holds only label sets the guard let through unchanged, so it is bounded
        by the guard's limit; a flood of new values takes the slow path and lands in
        ``other``.
        """
        key: tuple[int, tuple[object, ...]] | None = (id(metric), values)
        try:
            child = self._children.get(key)  # type: ignore[arg-type]
        except TypeError:
            key, child = None, None
        if child is not None:
            return child
        name = metric._name
        guard = self._guards.get(name)
        if guard is None:
            with self._lock:
                guard = self._guards.setdefault(name, LabelGuard())
        labels = guard.admit(values)
        child = metric.labels(*labels)
        if key is not None and OTHER not in labels:
            self._children[key] = child
        return child

    def _inc(self, metric: Any, *values: object, amount: float = 1.0) -> None:
        self._labels(metric, *values).inc(amount)

    def _observe(self, metric: Any, value: object, *values: object) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            self._labels(metric, *values).observe(float(value))

    def _build_handlers(self) -> dict[FactKind, Callable[[Mapping[str, object]], None]]:
        k = FactKind
        return {
            k.ATTEMPT_FINISHED: self._attempt,
            k.RETRY_SCHEDULED: self._retry,
            k.GAVE_UP: lambda f: self._inc(self.gave_up, f.get("task"), f.get("exception")),
            k.DEAD_LETTER_WRITTEN: self._dead_letter,
            k.DEAD_LETTER_REPLAYED: lambda f: self._inc(self.replays, f.get("source")),
            k.HEADER_REJECTED: lambda f: self._inc(self.header_rejected, f.get("task")),
            k.TIMER_SCHEDULED: lambda f: self._inc(self.timers_scheduled, _kind(f)),
            k.TIMER_FIRED: self._timer_fired,
            k.OUTBOX_RELAYED: self._relayed,
            k.DISPATCH_OUTCOME: self._dispatched,
            k.WORKFLOW_STEP: self._workflow_step,
            k.WORKFLOW_STEP_FAILED: lambda f: self._inc(
                self.workflow_errors,
                _workflow(f),
                field_of(f, "exception", "error") or "unknown",
                f.get("outcome") or "failed",
            ),
            k.WORKFLOW_TRANSITION: self._workflow_transition,
            k.STALE_COMPLETION: self._stale,
            k.BREAKER_TRANSITION: self._breaker,
            k.LIMIT_ADMITTED: lambda f: self._inc(self.admitted, _limit(f)),
            k.LIMIT_DEFERRED: lambda f: self._inc(self.deferred, _limit(f)),
            k.BACKEND_UNAVAILABLE: lambda f: self._inc(
                self.backend_down, field_of(f, "backend", "store", "name")
            ),
            **self._optional_handlers(),
        }

    def _optional_handlers(self) -> dict[FactKind, Callable[[Mapping[str, object]], None]]:
        """Kinds other parts append (``LIMIT_REJECTED``), when this version has them."""
        rejected = getattr(FactKind, "LIMIT_REJECTED", None)
        if rejected is None:
            return {}
        return {rejected: lambda f: self._inc(self.rejected, _limit(f))}

    def _attempt(self, f: Mapping[str, object]) -> None:
        self._inc(self.attempts, f.get("task"), f.get("outcome"))
        self._observe(self.attempt_seconds, f.get("duration_s"), f.get("task"))

    def _retry(self, f: Mapping[str, object]) -> None:
        self._inc(self.retries, f.get("task"), f.get("exception"))
        self._observe(self.retry_delay, f.get("delay_s"), f.get("task"))

    def _dead_letter(self, f: Mapping[str, object]) -> None:
        if f.get("stored") is False:
            self._inc(self.dead_letter_failures, f.get("source"))
        self._inc(self.dead_letters, f.get("source"), f.get("reason"))

    def _timer_fired(self, f: Mapping[str, object]) -> None:
        self._inc(self.timers_fired, _kind(f))
        self._observe(self.timer_lag, f.get("lag_s"), _kind(f))

    def _relayed(self, f: Mapping[str, object]) -> None:
        rows = f.get("rows")
        if isinstance(rows, int) and rows > 0:
            self._inc(self.relayed, f.get("topic"), amount=rows)

    def _dispatched(self, f: Mapping[str, object]) -> None:
        self._inc(self.dispatch, f.get("topic"), f.get("outcome"))
        self._observe(self.dispatch_seconds, f.get("duration_s"), f.get("topic"))

    def _workflow_step(self, f: Mapping[str, object]) -> None:
        self._inc(self.workflow_events, _workflow(f), f.get("outcome") or "processed")

    def _workflow_transition(self, f: Mapping[str, object]) -> None:
        state = field_of(f, "to_state", "state", "to")
        if state:  # a targetless transition enters no state
            self._inc(self.workflow_transitions, _workflow(f), state)

    def _stale(self, f: Mapping[str, object]) -> None:
        kind = f.get("message_kind")
        if kind == "timer":
            self._inc(self.stale_timers, _workflow(f))
        elif kind is None or kind in _COMPLETION_KINDS:
            self._inc(self.stale, _workflow(f))

    def _breaker(self, f: Mapping[str, object]) -> None:
        name = field_of(f, "breaker", "name")
        state = field_of(f, "to_state", "state", "to")
        scope = f.get("scope") or "process"
        self._inc(self.breaker_transitions, name, scope, state)
        value = BREAKER_STATES.get(str(state))
        if value is not None and scope != "fleet":
            self._labels(self.breaker_state, name).set(value)
            self._labels(self.breaker_changed, name).set_to_current_time()


def _factory(kind: Any, registry: CollectorRegistry) -> Callable[..., Any]:
    def make(name: str, doc: str, labels: tuple[str, ...], **options: Any) -> Any:
        return kind(name, doc, labels, registry=registry, **options)

    return make


def _kind(f: Mapping[str, object]) -> object:
    """A timer's purpose; every emitter names one, so a missing one shows as ``unknown``."""
    return field_of(f, "purpose", "timer") or "unknown"


def _workflow(f: Mapping[str, object]) -> object:
    return field_of(f, "workflow", "machine", "machine_id", "chart")


def _limit(f: Mapping[str, object]) -> object:
    return field_of(f, "limit", "limiter", "name")


def install_prometheus(registry: CollectorRegistry | None = None) -> PrometheusMetrics:
    """Create the metrics and subscribe them to the fact stream; return them.

    Call it once per process (the worker integration does it for you when
    ``xsm_metrics_port`` is set); a second call in the same registry fails as
    ``prometheus_client`` refuses duplicate metric names.
    """
    metrics = PrometheusMetrics(registry)
    subscribe(metrics.handle)
    return metrics
