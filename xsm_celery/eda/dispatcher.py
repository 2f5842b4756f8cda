"""``InboundDispatcher``: the consumer loop every broker adapter reuses.

For each delivery: validate the envelope, find the machine for its type, deduplicate on
the inbox, then load the instance named by its subject, send it the event, save it, and
settle the delivery. Nothing an envelope carries is raised into the loop: a malformed or
unknown envelope is dead-lettered at once, a failing one is requeued and dead-lettered
after ``max_attempts``, and an outage of a store is requeued without counting against the
message. The per-delivery decision is ``Handling``; this module drives it over batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xsm_celery.eda.broker import Delivery
from xsm_celery.eda.envelope import Envelope, default_event_name
from xsm_celery.eda.handling import Handling, Outcome
from xsm_celery.eda.outbox import collect_publishes, publish_specs
from xsm_celery.engine import Machine
from xsm_celery.engine.awaiting import finish, maybe_await
from xsm_celery.engine.clock import Clock
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns.dead_letter import DeadLetterStore
from xsm_celery.persistence.idempotency import IdempotencyPlugin
from xsm_celery.persistence.locks import OptimisticLock
from xsm_celery.persistence.protocols import Inbox, LockStrategy, StateStore

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_IN_FLIGHT",
    "DispatchResult",
    "InboundDispatcher",
]

logger = logging.getLogger("xsm_celery.eda")

#: ``InboundDispatcher(max_attempts=)`` default before an envelope is dead-lettered.
DEFAULT_MAX_ATTEMPTS = 5
#: ``InboundDispatcher(max_in_flight=)`` default: subjects processed concurrently.
DEFAULT_MAX_IN_FLIGHT = 16
#: Deliveries one ``run_once`` takes from the broker at most.
DEFAULT_BATCH = 1000
#: Failure counts the dispatcher remembers (oldest forgotten first).
_ATTEMPT_MEMORY = 10_000

_COUNTERS = {
    Outcome.PROCESSED: "processed",
    Outcome.DUPLICATE: "duplicates",
    Outcome.DEAD_LETTERED: "dead_lettered",
    Outcome.RETRY: "retried",
    Outcome.REQUEUE: "retried",
    Outcome.IGNORED: "ignored",
}


@dataclass
class DispatchResult:
    """What one ``run_once`` / ``handle`` did: counts, and each envelope's outcome in order.

    ``outcomes`` holds ``(envelope id, outcome)`` with outcome one of ``processed``,
    ``duplicate``, ``dead_lettered``, ``retried``, ``ignored``.
    """

    processed: int = 0
    duplicates: int = 0
    dead_lettered: int = 0
    retried: int = 0
    ignored: int = 0
    outcomes: list[tuple[str, str]] = field(default_factory=list)

    def record(self, envelope_id: str, outcome: Outcome) -> None:
        """Count one envelope's outcome."""
        name = _COUNTERS[outcome]
        setattr(self, name, getattr(self, name) + 1)
        self.outcomes.append((envelope_id, outcome.label))

    def add(self, other: DispatchResult) -> None:
        """Add another result's counts and outcomes to this one."""
        for name in ("processed", "duplicates", "dead_lettered", "retried", "ignored"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.outcomes.extend(other.outcomes)

    @property
    def total(self) -> int:
        """How many envelopes were handled."""
        return len(self.outcomes)


def _by_subject(batch: list[Delivery]) -> OrderedDict[str, list[Delivery]]:
    """Group a batch per subject, keeping each subject's delivery order."""
    groups: OrderedDict[str, list[Delivery]] = OrderedDict()
    for delivery in batch:
        env = delivery.envelope
        subject = env.subject if isinstance(env, Envelope) and env.subject else ""
        groups.setdefault(subject or f"\x00{id(delivery)}", []).append(delivery)
    return groups


class InboundDispatcher:
    """Consume envelopes into persisted machine instances.

    Args:
        store: A ``StateStore``; instances are keyed by ``key_for`` (the subject).
        machine_for_type: A mapping from CloudEvents type to machine, or a callable
            returning the machine or ``None``. ``None`` / ``KeyError`` mean unknown.
        lock: ``OptimisticLock()`` (default) or ``PessimisticLock()``.
        plugins: Plugins for every instance (an ``OutboxPlugin``, a ``DeadLetterPlugin``).
        inbox: An ``Inbox``; without one a redelivery runs again.
        max_in_flight: Subjects processed concurrently by ``run_once``.
        max_attempts: Deliveries of a failing envelope before it is dead-lettered.
        dead_letters: A dead-letter store or sink; default an in-memory store.
        event_type: ``(envelope) -> event name``; default ``default_event_name(type)``.
        clock: The instances' clock (tests pass a ``SimulatedClock``).
        key_for: ``(envelope, machine) -> instance key``; default the subject.
        dedup_key: ``(envelope) -> inbox key``; default the envelope id.
        on_unknown: ``"dead_letter"`` (default) or ``"ignore"`` for types no machine handles.
        batch: Deliveries one ``run_once`` takes at most.
        offload: Run each step in a worker thread in ``run_once`` (blocking stores).
    """

    def __init__(
        self,
        store: StateStore,
        machine_for_type: Mapping[str, Machine] | Callable[[str], Machine | None],
        *,
        lock: LockStrategy | None = None,
        plugins: Iterable[Any] = (),
        inbox: Inbox | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        dead_letters: Any = None,
        event_type: Callable[[Envelope], str] | None = None,
        clock: Clock | None = None,
        key_for: Callable[[Envelope, Machine], str] | None = None,
        dedup_key: Callable[[Envelope], str] | None = None,
        on_unknown: str = "dead_letter",
        batch: int = DEFAULT_BATCH,
        offload: bool = False,
    ) -> None:
        for name, value in (
            ("max_in_flight", max_in_flight),
            ("max_attempts", max_attempts),
            ("batch", batch),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be an int >= 1, got {value!r}")
        if on_unknown not in ("dead_letter", "ignore"):
            raise ConfigurationError(
                f"on_unknown must be 'dead_letter' or 'ignore', got {on_unknown!r}"
            )
        #: Whether ``dead_letters`` is the in-memory default (a host such as the Celery
        #: consumer step replaces it with a shared store).
        self.dead_letters_defaulted = dead_letters is None
        if dead_letters is None:
            dead_letters = DeadLetterStore()
        self.store = store
        self.machine_for_type = machine_for_type
        self.lock = lock if lock is not None else OptimisticLock()
        self.plugins = tuple(plugins)
        self.inbox = inbox
        self.idempotency = IdempotencyPlugin(inbox) if inbox is not None else None
        self.max_in_flight = max_in_flight
        self.max_attempts = max_attempts
        self.dead_letters = dead_letters
        self.event_type = event_type or (lambda env: default_event_name(env.type))
        self.clock = clock
        self.key_for = key_for or (lambda env, machine: str(env.subject))
        self.dedup_key = dedup_key or (lambda env: env.id)
        self.on_unknown = on_unknown
        self.batch = batch
        self.offload = offload
        self._failures: OrderedDict[str, int] = OrderedDict()
        self._excused: OrderedDict[str, int] = OrderedDict()
        self._check_machines()

    def _check_machines(self) -> None:
        """Refuse a malformed ``meta.publish`` now rather than at the first delivery."""
        if isinstance(self.machine_for_type, Mapping):
            for machine in self.machine_for_type.values():
                publish_specs(machine)

    def machine_for(self, envelope_type: str) -> Machine | None:
        """Return the machine for a CloudEvents type, or ``None`` when none handles it."""
        if isinstance(self.machine_for_type, Mapping):
            return self.machine_for_type.get(envelope_type)
        try:
            return self.machine_for_type(envelope_type)
        except KeyError:
            return None

    def failures_of(self, envelope_id: str) -> int:
        """Return how many failed attempts this process saw for ``envelope_id``."""
        return self._failures.get(envelope_id, 0)

    def attempts_of(self, envelope: Envelope) -> int:
        """Return the failed attempts of ``envelope``: the larger of its count and ours.

        The broker's count (``xsmattempt``) also grows when a delivery was requeued through
        no fault of its own (a store outage, waiting behind its subject); those requeues
        seen by this process are taken off, so an outage never turns into poison.
        """
        broker_count = envelope.attempt - self._excused.get(envelope.id, 0)
        return max(broker_count, self._failures.get(envelope.id, 0))

    def count_failure(self, envelope: Envelope) -> int:
        """Count one more failed attempt; return the attempts made so far."""
        seen = self.attempts_of(envelope) + 1
        _remember(self._failures, envelope.id, seen)
        return seen

    def excuse(self, envelope_id: str) -> None:
        """Note a requeue that is not the envelope's fault, so it is not counted."""
        if envelope_id:
            _remember(self._excused, envelope_id, self._excused.get(envelope_id, 0) + 1)

    def forget(self, envelope_id: str) -> None:
        """Drop the counts of a settled envelope."""
        self._failures.pop(envelope_id, None)
        self._excused.pop(envelope_id, None)

    def _outcome(self, raw: Any, topic: str | None) -> tuple[str, Outcome]:
        with collect_publishes() as pending:
            result = Handling(self, raw, topic).run()
        for item in pending:
            finish(item, "outbox publish")
        if result[1] is Outcome.REQUEUE:
            self.excuse(result[0])
        return result

    async def _outcome_async(self, raw: Any, topic: str | None) -> tuple[str, Outcome]:
        with collect_publishes() as pending:
            if self.offload:
                result = await asyncio.to_thread(Handling(self, raw, topic).run)
            else:
                result = Handling(self, raw, topic).run()
        for item in pending:
            await item
        if result[1] is Outcome.REQUEUE:
            self.excuse(result[0])
        return result

    def handle(self, envelope: Any, topic: str | None = None) -> DispatchResult:
        """Process one envelope (an ``Envelope``, its JSON, or its dict); nothing to settle."""
        result = DispatchResult()
        result.record(*self._outcome(envelope, topic))
        return result

    def _settle_group_sync(
        self, broker: Any, group: list[Delivery], result: DispatchResult
    ) -> None:
        for index, delivery in enumerate(group):
            env_id, outcome = self._outcome(delivery.envelope, delivery.topic)
            result.record(env_id, outcome)
            if outcome.requeue:
                _requeue_sync(broker, group[index:])
                self._behind(group[index + 1 :], result)
                return
            _settle_sync(broker.ack, delivery)

    def _behind(self, later: list[Delivery], result: DispatchResult) -> None:
        """Record the deliveries requeued behind a failed one of their subject."""
        for delivery in later:
            env_id = _envelope_id(delivery)
            result.record(env_id, Outcome.REQUEUE)
            self.excuse(env_id)

    def _take_sync(self, broker: Any, topic: str) -> list[Delivery]:
        taken: list[Delivery] = []
        stream = broker.subscribe(topic, timeout=0)
        for delivery in stream:
            taken.append(delivery)
            if len(taken) >= self.batch:
                break
        close = getattr(stream, "close", None)
        if close is not None:
            close()
        return taken

    def run_once_sync(self, broker: Any, topic: str) -> DispatchResult:
        """Drain what ``topic`` holds now through a blocking adapter; settle every delivery."""
        result = DispatchResult()
        for group in _by_subject(self._take_sync(broker, topic)).values():
            self._settle_group_sync(broker, group, result)
        return result

    async def _take(self, broker: Any, topic: str) -> list[Delivery]:
        taken: list[Delivery] = []
        stream = broker.subscribe(topic, timeout=0)
        try:
            async for delivery in stream:
                taken.append(delivery)
                if len(taken) >= self.batch:
                    break
        finally:
            await stream.aclose()
        return taken

    async def _settle_group(
        self, broker: Any, group: list[Delivery], result: DispatchResult, gate: asyncio.Semaphore
    ) -> None:
        async with gate:
            for index, delivery in enumerate(group):
                env_id, outcome = await self._outcome_async(delivery.envelope, delivery.topic)
                result.record(env_id, outcome)
                if outcome.requeue:
                    for later in reversed(group[index:]):
                        await _settle(broker.nack, later, requeue=True)
                    self._behind(group[index + 1 :], result)
                    return
                await _settle(broker.ack, delivery)

    async def run_once(self, broker: Any, topic: str) -> DispatchResult:
        """Drain what ``topic`` holds now; subjects run concurrently up to ``max_in_flight``."""
        result = DispatchResult()
        gate = asyncio.Semaphore(self.max_in_flight)
        groups = _by_subject(await self._take(broker, topic)).values()
        await asyncio.gather(*(self._settle_group(broker, g, result, gate) for g in groups))
        return result

    async def run_forever(
        self, broker: Any, topic: str, stop_event: asyncio.Event, *, idle_s: float = 0.05
    ) -> DispatchResult:
        """Run ``run_once`` until ``stop_event`` is set; return the totals."""
        total = DispatchResult()
        while not stop_event.is_set():
            result = await self.run_once(broker, topic)
            total.add(result)
            if not result.total:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop_event.wait(), timeout=idle_s)
        return total

    def run_forever_sync(
        self, broker: Any, topic: str, stop_event: Any, *, idle_s: float = 0.05
    ) -> DispatchResult:
        """Blocking twin of ``run_forever``; ``stop_event`` is a ``threading.Event``."""
        total = DispatchResult()
        while not stop_event.is_set():
            result = self.run_once_sync(broker, topic)
            total.add(result)
            if not result.total:
                stop_event.wait(idle_s)
        return total


def _remember(counts: OrderedDict[str, int], key: str, value: int) -> None:
    """Set a count in a bounded LRU: the oldest entries are forgotten first."""
    counts.pop(key, None)
    counts[key] = value
    while len(counts) > _ATTEMPT_MEMORY:
        counts.popitem(last=False)


def _envelope_id(delivery: Delivery) -> str:
    env = delivery.envelope
    return env.id if isinstance(env, Envelope) else ""


def _requeue_sync(broker: Any, deliveries: list[Delivery]) -> None:
    """Requeue a failed delivery and the later ones of its subject, keeping their order."""
    for delivery in reversed(deliveries):
        _settle_sync(broker.nack, delivery, requeue=True)


_SETTLE_FAILED = "settling envelope %s failed; the broker redelivers it"


def _settle_sync(settle: Callable[..., Any], delivery: Delivery, **options: Any) -> None:
    """Ack or nack; a broker that fails here will redeliver, so it is logged, not raised."""
    try:
        settle(delivery, **options)
    except Exception:
        logger.exception(_SETTLE_FAILED, _envelope_id(delivery))


async def _settle(settle: Callable[..., Any], delivery: Delivery, **options: Any) -> None:
    """Async twin of ``_settle_sync``."""
    try:
        await maybe_await(settle(delivery, **options))
    except Exception:
        logger.exception(_SETTLE_FAILED, _envelope_id(delivery))
