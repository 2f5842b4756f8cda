"""OpenTelemetry spans fed from the fact stream (``pip install 'xsm-celery[tracing]'``).

Only ``opentelemetry-api`` is needed: without an SDK its tracer is a no-op and nothing is
recorded or sent. With one, ``install_tracing()`` gives

* a span per chart-task attempt (``xsm.task <name>``), current while the attempt runs, with
  its attempt number, outcome, exception type and retry delay, parented on the
  ``traceparent`` the task message carried;
* the trace context written into everything that leaves the process: the retry message
  (countdown or durable timer row), and every envelope a chart publishes (its
  ``traceparent`` extension), through the ``OUTBOUND`` fact's carrier;
* a span per dispatcher delivery and per workflow step, parented on the envelope's or the
  event's ``traceparent``, and a span per relayed outbox row parented on the row's, so an
  outbox publish, its relay and the consumer's step are one trace.

The W3C trace-context format is written and read directly (not the global propagator),
because an envelope extension must be exactly ``traceparent`` / ``tracestate``.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from xsm_celery.errors import MissingExtraError
from xsm_celery.hooks import Fact, FactKind, subscribe

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:
    raise MissingExtraError(extra="tracing", module="opentelemetry") from exc

__all__ = ["TRACER_NAME", "Tracing", "inject", "install_tracing"]

#: The instrumentation name spans are recorded under.
TRACER_NAME = "xsm_celery"

_FAILED = frozenset({"gave_up", "error", "dead_lettered"})
_propagator = TraceContextTextMapPropagator()
_open: contextvars.ContextVar[tuple[tuple[Any, Any], ...]] = contextvars.ContextVar(
    "xsm_celery_open_spans", default=()
)


def _parent(traceparent: object) -> Any:
    """The context a span continues: the carried trace, else the current one."""
    if isinstance(traceparent, str) and traceparent:
        return _propagator.extract({"traceparent": traceparent})
    return otel_context.get_current()


def inject(carrier: MutableMapping[str, Any]) -> None:
    """Write the current span's ``traceparent`` into ``carrier`` when a span is recording."""
    if trace.get_current_span().get_span_context().is_valid:
        _propagator.inject(carrier)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _attributes(fields: Mapping[str, object], *names: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        value = fields.get(name)
        if isinstance(value, str | bool | int | float):
            out[f"xsm.{name}"] = value
    return out


class Tracing:
    """The spans of the fact stream (see the module docstring).

    Args:
        tracer_provider: The provider to record with; OpenTelemetry's global one if None.
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        self.tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        k = FactKind
        self._handlers: dict[FactKind, Callable[[Mapping[str, object]], None]] = {
            k.ATTEMPT_STARTED: self._attempt_started,
            k.ATTEMPT_FINISHED: self._attempt_finished,
            k.OUTBOUND: self._outbound,
            k.DISPATCH_OUTCOME: self._dispatched,
            k.OUTBOX_RELAYED: self._relayed,
            k.WORKFLOW_STEP: self._workflow_step,
            k.RETRY_SCHEDULED: self._note("xsm.retry_scheduled", "delay_s", "exception", "durable"),
            k.GAVE_UP: self._note("xsm.gave_up", "exception"),
            k.DEAD_LETTER_WRITTEN: self._note("xsm.dead_letter", "reason", "stored"),
            k.WORKFLOW_TRANSITION: self._note("xsm.workflow_transition", "from_state", "to_state"),
            k.LIMIT_DEFERRED: self._note("xsm.deferred", "limit", "delay_s"),
            k.BREAKER_TRANSITION: self._note("xsm.breaker", "breaker", "to_state"),
        }

    def handle(self, fact: Fact) -> None:
        """The ``xsm_celery.hooks`` subscriber."""
        handler = self._handlers.get(fact.kind)
        if handler is not None:
            handler(fact.fields)

    def _attempt_started(self, f: Mapping[str, object]) -> None:
        parent = _parent(f.get("traceparent"))
        span = self.tracer.start_span(
            f"xsm.task {f.get('task')}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={"xsm.task": str(f.get("task")), "xsm.attempt": _int(f.get("attempt"))},
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        _open.set((*_open.get(), (span, token)))

    def _attempt_finished(self, f: Mapping[str, object]) -> None:
        stack = _open.get()
        if not stack:
            return
        (span, token), rest = stack[-1], stack[:-1]
        _open.set(rest)
        span.set_attributes(_attributes(f, "outcome", "exception"))
        if f.get("outcome") in _FAILED:
            span.set_status(Status(StatusCode.ERROR, str(f.get("exception") or "")))
        span.end()
        otel_context.detach(token)

    def _outbound(self, f: Mapping[str, object]) -> None:
        carrier = f.get("carrier")
        if isinstance(carrier, MutableMapping):
            inject(carrier)

    def _after_the_fact(self, name: str, f: Mapping[str, object], *names: str) -> None:
        """A span for work that already happened, timed by its ``duration_s``."""
        end = time.time_ns()
        duration = f.get("duration_s")
        seconds = float(duration) if isinstance(duration, int | float) else 0.0
        span = self.tracer.start_span(
            name,
            context=_parent(f.get("traceparent")),
            kind=SpanKind.CONSUMER,
            attributes=_attributes(f, *names),
            start_time=end - int(seconds * 1e9),
        )
        if f.get("outcome") in _FAILED:
            span.set_status(Status(StatusCode.ERROR, str(f.get("outcome"))))
        span.end(end_time=end)

    def _dispatched(self, f: Mapping[str, object]) -> None:
        where = f.get("machine") or f.get("topic") or "unknown"
        self._after_the_fact(
            f"xsm.dispatch {where}", f, "topic", "machine", "outcome", "envelope_id", "counted"
        )

    def _workflow_step(self, f: Mapping[str, object]) -> None:
        name = f.get("workflow") or f.get("machine") or "workflow"
        self._after_the_fact(
            f"xsm.workflow {name}", f, "workflow", "event", "outcome", "attempt", "delay_s", "state"
        )

    def _relayed(self, f: Mapping[str, object]) -> None:
        parents = f.get("traceparents")
        if not isinstance(parents, tuple):
            return
        for parent in dict.fromkeys(p for p in parents if p):
            span = self.tracer.start_span(
                f"xsm.outbox.relay {f.get('topic')}",
                context=_parent(parent),
                kind=SpanKind.PRODUCER,
                attributes=_attributes(f, "topic", "rows"),
            )
            span.end()

    def _note(self, name: str, *names: str) -> Callable[[Mapping[str, object]], None]:
        def add_event(f: Mapping[str, object]) -> None:
            span = trace.get_current_span()
            if span.is_recording():
                span.add_event(name, _attributes(f, *names))

        return add_event


def install_tracing(tracer_provider: Any = None) -> Tracing:
    """Create the span exporter-side subscriber and subscribe it; return it."""
    tracing = Tracing(tracer_provider)
    subscribe(tracing.handle)
    return tracing
