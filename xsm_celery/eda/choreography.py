"""``ChoreographyRouter``: machines that react to each other's integration events.

There is no orchestrator: each route says which machine handles an event type and which
chart event it becomes, and the router is an ``InboundDispatcher`` over those routes. Its
instances are keyed ``<machine id>:<subject>``, so an order and its payment can share one
business key without sharing an instance, and types with no route are acked and ignored by
default, because a shared bus carries other services' events too. The causation chain the
``OutboxPlugin`` stamps (``causationid`` / ``correlationid``) is what ties the conversation
together; see docs/sagas.md for when to prefer a saga.

The router wraps an ``InboundDispatcher`` and forwards every other attribute to it, so it lives
beside the dispatcher. The seeds import it from ``xsm_celery.patterns``, which resolves the
name from here on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from xsm_celery.eda.dispatcher import DispatchResult, InboundDispatcher
from xsm_celery.eda.envelope import Envelope, default_event_name
from xsm_celery.eda.outbox import publish_specs
from xsm_celery.engine import Machine, is_engine_event_type
from xsm_celery.errors import ArgumentTypeError, ChoreographyUnsettledError, ConfigurationError

__all__ = ["DEFAULT_MAX_ROUNDS", "DEFAULT_TOPIC", "ChoreographyRouter", "Route", "instance_key"]

#: ``run_until_quiet(max_rounds=)`` default: drains of every topic before giving up.
DEFAULT_MAX_ROUNDS = 100
#: The topic drained when no ``OutboxPlugin`` names one (``OutboxPlugin``'s own default).
DEFAULT_TOPIC = "events"

#: Dispatcher options the router computes from its routes and so refuses.
_OWNED = ("machine_for_type", "event_type", "key_for")


class Route(NamedTuple):
    """The explicit form of a route: the machine and the chart event the type becomes.

    ``event=None`` keeps the dispatcher's default mapping: ``xsm.<machine>.<EVENT>`` becomes
    ``EVENT``, any other type is sent unchanged.
    """

    machine: Machine
    event: str | None = None


def instance_key(machine: Machine, subject: str) -> str:
    """The store key of ``machine``'s instance for ``subject``: ``<machine id>:<subject>``."""
    return f"{machine.id}:{subject}"


def _route_of(envelope_type: object, value: object) -> Route:
    """Normalise one mapping value (a machine, ``(machine, EVENT)`` or a ``Route``)."""
    if not isinstance(envelope_type, str) or not envelope_type:
        raise ConfigurationError(
            f"a route's key must be a CloudEvents type string, got {envelope_type!r}"
        )
    if isinstance(value, Machine):
        return Route(value)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], Machine):
        event = value[1]
        if event is not None and (not isinstance(event, str) or not event.strip()):
            raise ConfigurationError(
                f"route {envelope_type!r}: the event must be a non-empty chart event name "
                f"such as 'CHARGE', got {event!r}"
            )
        if isinstance(event, str) and is_engine_event_type(event):
            raise ConfigurationError(
                f"route {envelope_type!r}: {event!r} is an engine-reserved event name; the "
                "engine drives done.invoke / error.platform / after itself, so route to a "
                "plain event such as 'PAID'"
            )
        return Route(value[0], event)
    raise ArgumentTypeError(
        f"route {envelope_type!r} must be a Machine, a (machine, 'EVENT') pair or a "
        f"Route(machine, event), got {type(value).__name__}"
    )


def _routes(routes: Mapping[str, Any]) -> dict[str, Route]:
    if not isinstance(routes, Mapping):
        raise ArgumentTypeError(
            f"routes must map CloudEvents types to machines, got {type(routes).__name__}"
        )
    return {kind: _route_of(kind, value) for kind, value in routes.items()}


def _check_rounds(max_rounds: object) -> int:
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise ConfigurationError(
            f"max_rounds must be >= 1 (a positive count of drains), got {max_rounds!r}"
        )
    return max_rounds


def _unsettled(max_rounds: int) -> ChoreographyUnsettledError:
    return ChoreographyUnsettledError(
        f"choreography did not settle in {max_rounds} rounds (an event loop between "
        "machines?): break the cycle with a final state or a guard, or raise max_rounds "
        "for a genuinely long conversation",
        rounds=max_rounds,
    )


class ChoreographyRouter:
    """An ``InboundDispatcher`` over a ``type -> machine`` or ``type -> (machine, EVENT)`` map.

    Args:
        store: The ``StateStore`` every routed machine's instances live in.
        routes: CloudEvents type -> ``Machine``, ``(machine, "EVENT")`` or ``Route``.
        on_unknown: ``"ignore"`` (default: ack types with no route) or ``"dead_letter"``.
        **options: Any other ``InboundDispatcher`` option (``inbox``, ``plugins``,
            ``lock``, ``dedup_key``, ``max_attempts``, ``dead_letters``, ``clock``...).

    Raises:
        TypeError: A route is not a machine, pair or ``Route``; or an option the router
            computes itself (``machine_for_type``, ``event_type``, ``key_for``) was passed.
        ValueError: A route names an empty or engine-reserved event.
    """

    def __init__(
        self,
        store: Any,
        routes: Mapping[str, Any],
        *,
        on_unknown: str = "ignore",
        **options: Any,
    ) -> None:
        owned = [name for name in _OWNED if name in options]
        if owned:
            raise ArgumentTypeError(
                f"ChoreographyRouter computes {', '.join(owned)} from its routes; pass the "
                "routes mapping instead (use InboundDispatcher for a custom mapping)"
            )
        self.routes = _routes(routes)
        self.dispatcher = InboundDispatcher(
            store,
            self._machine_for,
            event_type=self._event_for,
            key_for=lambda envelope, machine: instance_key(machine, str(envelope.subject)),
            on_unknown=on_unknown,
            **options,
        )
        self._check_publications()

    def _check_publications(self) -> None:
        """Refuse a malformed ``meta.publish`` in any routed chart now, not on delivery."""
        for route in self.routes.values():
            publish_specs(route.machine)

    def _machine_for(self, envelope_type: str) -> Machine | None:
        route = self.routes.get(envelope_type)
        return route.machine if route is not None else None

    def _event_for(self, envelope: Envelope) -> str:
        route = self.routes.get(envelope.type)
        if route is not None and route.event is not None:
            return route.event
        return default_event_name(envelope.type)

    def __getattr__(self, name: str) -> Any:
        """Every other dispatcher attribute and method (``inbox``, ``plugins``,
        ``run_forever``...) is the wrapped dispatcher's, so a router goes wherever a
        dispatcher does."""
        if name == "dispatcher":
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def topics(self) -> list[str]:
        """The topics ``run_until_quiet`` drains by default: those its outbox plugins use."""
        found = [getattr(p, "topic", None) for p in self.dispatcher.plugins]
        named = sorted({t for t in found if isinstance(t, str) and t})
        return named or [DEFAULT_TOPIC]

    def handle(self, envelope: Any, topic: str | None = None) -> DispatchResult:
        """Process one envelope (nothing to settle)."""
        return self.dispatcher.handle(envelope, topic)

    async def run_once(self, broker: Any, topic: str) -> DispatchResult:
        """Drain what ``topic`` holds now through an async adapter."""
        return await self.dispatcher.run_once(broker, topic)

    def run_once_sync(self, broker: Any, topic: str) -> DispatchResult:
        """Drain what ``topic`` holds now through a blocking adapter."""
        return self.dispatcher.run_once_sync(broker, topic)

    async def run_until_quiet(
        self,
        broker: Any,
        topics: str | Iterable[str] | None = None,
        *,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
    ) -> DispatchResult:
        """Drain ``topics`` round after round until a round finds nothing; return the totals.

        Each envelope a machine publishes lands on the bus and is picked up by the next
        round, so a whole conversation settles here (tests, a one-shot catch-up).

        Raises:
            ValueError: ``max_rounds`` is not a positive int.
            ChoreographyUnsettledError: Still busy after ``max_rounds`` rounds (a
                ``RuntimeError``): two routes publish at each other forever.
        """
        return await _until_quiet_async(self, broker, self._topics(topics), max_rounds)

    def run_until_quiet_sync(
        self,
        broker: Any,
        topics: str | Iterable[str] | None = None,
        *,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
    ) -> DispatchResult:
        """Blocking twin of ``run_until_quiet`` for a ``SyncBrokerAdapter``."""
        return _until_quiet(self.run_once_sync, broker, self._topics(topics), max_rounds)

    def _topics(self, topics: str | Iterable[str] | None) -> list[str]:
        if topics is None:
            return self.topics()
        chosen = [topics] if isinstance(topics, str) else list(topics)
        if not chosen or not all(isinstance(t, str) and t for t in chosen):
            raise ConfigurationError(
                f"topics must be a topic name or a list of them, got {topics!r}"
            )
        return chosen

    def __repr__(self) -> str:
        return f"ChoreographyRouter(routes={sorted(self.routes)})"


def _until_quiet(
    run_once: Callable[[Any, str], DispatchResult],
    broker: Any,
    topics: list[str],
    max_rounds: int,
) -> DispatchResult:
    rounds = _check_rounds(max_rounds)
    total = DispatchResult()
    for _ in range(rounds):
        handled = 0
        for topic in topics:
            result = run_once(broker, topic)
            total.add(result)
            handled += result.total
        if handled == 0:
            return total
    raise _unsettled(rounds)


async def _until_quiet_async(
    router: ChoreographyRouter, broker: Any, topics: list[str], max_rounds: int
) -> DispatchResult:
    rounds = _check_rounds(max_rounds)
    total = DispatchResult()
    for _ in range(rounds):
        handled = 0
        for topic in topics:
            result = await router.run_once(broker, topic)
            total.add(result)
            handled += result.total
        if handled == 0:
            return total
        await asyncio.sleep(0)
    raise _unsettled(rounds)
