"""@circuit_breaker: one breaker per decorated function, sync or async, never on generators."""

from __future__ import annotations

import asyncio

import pytest

from xsm_celery.engine import SimulatedClock
from xsm_celery.patterns import CircuitBreaker, CircuitOpenError, circuit_breaker


def test_sync_function_gets_its_own_breaker() -> None:
    """The wrapper runs through fn.breaker and keeps the function's name."""
    clock = SimulatedClock()

    @circuit_breaker(failure_threshold=1, cooldown_ms=100, clock=clock)
    def fetch(ok: bool) -> str:
        if not ok:
            raise TimeoutError("slow")
        return "data"

    assert isinstance(fetch.breaker, CircuitBreaker)  # type: ignore[attr-defined]
    assert fetch.__name__ == "fetch"
    with pytest.raises(TimeoutError):
        fetch(False)
    with pytest.raises(CircuitOpenError, match="fetch"):
        fetch(True)
    clock.increment(101)
    assert fetch(True) == "data"


def test_async_function() -> None:
    """An async def stays awaitable and is protected by acall."""
    clock = SimulatedClock()

    @circuit_breaker(failure_threshold=1, cooldown_ms=500, clock=clock)
    async def fetch(ok: bool) -> str:
        if not ok:
            raise TimeoutError("slow")
        return "data"

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await fetch(False)
        assert fetch.breaker.state == "open"  # type: ignore[attr-defined]
        with pytest.raises(CircuitOpenError):
            await fetch(True)
        await clock.increment(501)
        assert await fetch(True) == "data"

    assert asyncio.iscoroutinefunction(fetch)
    asyncio.run(main())


def test_bare_decorator() -> None:
    """@circuit_breaker without arguments uses the defaults."""

    @circuit_breaker
    def ping() -> str:
        return "pong"

    assert ping() == "pong"
    assert ping.breaker.state == "closed"  # type: ignore[attr-defined]


def test_one_decorator_on_two_functions_gives_two_named_breakers() -> None:
    """Reusing one decorator object does not share a breaker or a name."""
    deco = circuit_breaker(failure_threshold=1)

    @deco
    def first() -> None:
        raise RuntimeError("x")

    @deco
    def second() -> str:
        return "ok"

    assert first.breaker is not second.breaker  # type: ignore[attr-defined]
    assert first.breaker.name.endswith("first")  # type: ignore[attr-defined]
    assert second.breaker.name.endswith("second")  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        first()
    assert second() == "ok"


def test_explicit_name_wins() -> None:
    """name= is kept as given."""

    @circuit_breaker(name="inventory")
    def check() -> None:
        return None

    assert check.breaker.name == "inventory"  # type: ignore[attr-defined]


def test_generator_functions_are_refused_at_decoration() -> None:
    """Generators and async generators raise TypeError when decorated."""
    with pytest.raises(TypeError, match="generator"):

        @circuit_breaker()
        def numbers():  # type: ignore[no-untyped-def]
            yield 1

    with pytest.raises(TypeError, match="generator"):

        @circuit_breaker()
        async def stream():  # type: ignore[no-untyped-def]
            yield 1


def test_bad_options_fail_at_decoration() -> None:
    """A bad option is refused when the function is decorated, not at its first call."""
    with pytest.raises(ValueError, match="cooldown_ms"):

        @circuit_breaker(cooldown_ms=-1)
        def f() -> None:
            return None


def test_method_breaker_is_shared_by_instances() -> None:
    """On a method the breaker belongs to the class: one instance's failures trip it for all."""

    class Client:
        @circuit_breaker(failure_threshold=1, clock=SimulatedClock())
        def get(self, ok: bool) -> str:
            if not ok:
                raise ConnectionError("down")
            return "ok"

    a, b = Client(), Client()
    with pytest.raises(ConnectionError):
        a.get(False)
    with pytest.raises(CircuitOpenError):
        b.get(True)
