"""``Fallback``: ordered strategies, only for the failures they are meant for."""

from __future__ import annotations

import asyncio

import pytest

from xsm_celery.hooks import FactKind, subscribe
from xsm_celery.patterns import Fallback


class Flaky:
    """Fails ``failures`` times with ``error`` and then returns ``value``."""

    def __init__(self, failures: int, value: object = "primary", error: type = ConnectionError):
        self.failures = failures
        self.value = value
        self.error = error
        self.calls = 0

    def __call__(self, *args: object) -> object:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"down {self.calls}")
        return self.value


def test_a_success_runs_no_strategy() -> None:
    """The primary's value is returned and no alternative is called."""
    alternative = Flaky(0, "alt")
    assert Fallback().alternative(alternative).call(Flaky(0)) == "primary"
    assert alternative.calls == 0


def test_retry_fallback_tries_the_primary_again() -> None:
    """``retry_fallback(2)`` gives the primary two more chances."""
    primary = Flaky(2)
    assert Fallback().retry_fallback(2).call(primary) == "primary"
    assert primary.calls == 3


def test_strategies_run_in_order_until_one_works() -> None:
    """Retry, then an alternative with the same arguments, then a degraded value."""
    seen: list[tuple[object, ...]] = []

    def replica(*args: object) -> str:
        seen.append(args)
        raise ConnectionError("replica down")

    chain = Fallback().retry_fallback(1).alternative(replica).degrade("cached")
    assert chain.call(Flaky(5), "q", 7) == "cached"
    assert seen == [("q", 7)]


def test_degrade_with_a_factory_sees_the_error() -> None:
    """``degrade(factory=...)`` builds the answer from the failure."""
    chain = Fallback().degrade(factory=lambda exc: f"degraded: {exc}")
    assert chain.call(Flaky(1)) == "degraded: down 1"


def test_other_failures_are_not_papered_over() -> None:
    """An exception outside ``on`` propagates at once; no strategy runs."""
    chain = Fallback(on=ConnectionError).degrade("default")
    with pytest.raises(KeyError):
        chain.call(Flaky(1, error=KeyError))


def test_when_every_strategy_fails_the_last_error_is_raised() -> None:
    """The last failure propagates, with the earlier ones on its ``__context__`` chain."""

    def alternative() -> str:
        raise TimeoutError("alt too")

    with pytest.raises(TimeoutError, match="alt too") as info:
        Fallback().alternative(alternative).call(Flaky(1))
    assert isinstance(info.value.__context__, ConnectionError)


def test_builders_return_new_fallbacks() -> None:
    """Extending a shared base leaves the base unchanged."""
    base = Fallback()
    extended = base.degrade(0)
    with pytest.raises(ConnectionError):
        base.call(Flaky(1))
    assert extended.call(Flaky(1)) == 0


def test_async_calls_and_the_decorator() -> None:
    """``acall`` and ``@Fallback(...)`` await the primary and async alternatives."""

    async def alt() -> str:
        return "async alt"

    @Fallback().alternative(alt)
    async def primary() -> str:
        raise ConnectionError("down")

    assert asyncio.run(primary()) == "async alt"
    assert asyncio.run(Fallback().retry_fallback(1).acall(Flaky(1))) == "primary"


def test_each_strategy_used_is_a_fact() -> None:
    """``FALLBACK_USED`` names the fallback, the strategy and the error type."""
    seen = []
    stop = subscribe(seen.append)
    try:
        Fallback(name="prices").retry_fallback(1).degrade(None).call(Flaky(9))
    finally:
        stop()
    facts = [dict(f.fields) for f in seen if f.kind is FactKind.FALLBACK_USED]
    assert facts == [
        {"fallback": "prices", "strategy": "retry", "error_type": "ConnectionError"},
        {"fallback": "prices", "strategy": "degrade", "error_type": "ConnectionError"},
    ]


def test_bad_builders_are_refused() -> None:
    """Zero attempts, a non-callable alternative or a degrade with nothing are errors."""
    with pytest.raises(ValueError, match="attempts"):
        Fallback().retry_fallback(0)
    with pytest.raises(TypeError, match="callable"):
        Fallback().alternative("nope")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exactly one"):
        Fallback().degrade()
    with pytest.raises(TypeError, match="exception classes"):
        Fallback(on=("x",))  # type: ignore[arg-type]
