"""``@idempotent`` with the memory store: contract, failures, keys, async, facts."""

from __future__ import annotations

import asyncio

import pytest

from tests.patterns.contract_idempotency import IdempotencyStoreContract
from xsm_celery.engine import SimulatedClock
from xsm_celery.hooks import FactKind, subscribe
from xsm_celery.patterns import MemoryIdempotencyStore, default_key, idempotent


class TestMemoryIdempotencyStore(IdempotencyStoreContract):
    """``MemoryIdempotencyStore`` keeps the idempotency store contract."""

    @pytest.fixture
    def store(self) -> MemoryIdempotencyStore:
        """A fresh memory store on wall time."""
        return MemoryIdempotencyStore()


def test_a_failure_is_not_remembered() -> None:
    """A call that raised leaves no result, so the next call runs for real."""
    calls = []

    @idempotent()
    def flaky(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            raise ConnectionError("down")
        return n * 2

    with pytest.raises(ConnectionError):
        flaky(3)
    assert flaky(3) == 6
    assert flaky(3) == 6
    assert calls == [3, 3]


def test_results_expire_by_the_store_clock() -> None:
    """After ``ttl_s`` the key runs again."""
    clock = SimulatedClock()
    calls = []

    @idempotent(MemoryIdempotencyStore(clock=clock), ttl_s=10)
    def work() -> int:
        calls.append(1)
        return len(calls)

    assert (work(), work()) == (1, 1)
    clock.increment(10_000)
    assert work() == 2


def test_the_default_key_is_the_arguments() -> None:
    """Equal JSON arguments give one key; different ones give another; objects are refused."""
    assert default_key(1, b=[2]) == default_key(1, b=[2])
    assert default_key(1, b=[2]) != default_key(1, b=[3])
    with pytest.raises(TypeError, match="pass key="):
        default_key(object())


def test_a_result_json_cannot_hold_is_a_clear_error() -> None:
    """An unstorable result raises ``TypeError`` and releases the key for the next call."""
    calls = []

    @idempotent()
    def make() -> object:
        calls.append(1)
        return object()

    for _ in range(2):
        with pytest.raises(TypeError, match="dumps="):
            make()
    assert len(calls) == 2


def test_async_functions_are_guarded_too() -> None:
    """An ``async def`` body runs once per key."""
    calls = []

    @idempotent(key=lambda x: f"k{x}")
    async def fetch(x: int) -> int:
        calls.append(x)
        await asyncio.sleep(0)
        return x + 1

    async def main() -> list[int]:
        return [await fetch(1), await fetch(1), await fetch(2)]

    assert asyncio.run(main()) == [2, 2, 3]
    assert calls == [1, 2]


def test_a_replay_is_a_fact() -> None:
    """Answering from the store emits ``IDEMPOTENT_REPLAYED`` with the function's name only."""
    seen = []

    @idempotent(name="billing.charge")
    def charge(order: int) -> str:
        return "ok"

    stop = subscribe(seen.append)
    try:
        charge(1)
        charge(1)
    finally:
        stop()
    facts = [dict(f.fields) for f in seen if f.kind is FactKind.IDEMPOTENT_REPLAYED]
    assert facts == [{"call": "billing.charge"}]


@pytest.mark.parametrize(("option", "value"), [("ttl_s", 0), ("claim_ttl_s", None)])
def test_bad_ttls_are_refused(option: str, value: object) -> None:
    """A TTL that is not positive (or a missing claim TTL) is a ``ValueError``."""
    with pytest.raises(ValueError, match=option):
        idempotent(**{option: value})  # type: ignore[arg-type]
