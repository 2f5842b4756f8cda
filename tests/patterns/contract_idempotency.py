"""The behaviour every ``IdempotencyStore`` shares, as a reusable test suite.

Subclass ``IdempotencyStoreContract`` and give it a ``store`` fixture returning an empty
store; every test then runs against that implementation (memory, Redis, SQLite and
PostgreSQL in this repository). The suite uses real time with TTLs of a few hundred
milliseconds, so stores that expire keys by their server's clock pass it too.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from xsm_celery.errors import IdempotencyInProgressError
from xsm_celery.patterns.idempotency import IdempotencyStore, idempotent

__all__ = ["IdempotencyStoreContract"]


def fresh() -> str:
    """A key no other test uses."""
    return f"contract:{uuid.uuid4().hex}"


class IdempotencyStoreContract:
    """Claims, results, takeovers and races, as every store must keep them."""

    def test_the_first_claim_wins_and_a_second_waits(self, store: IdempotencyStore) -> None:
        """A fresh key is claimed; another token sees it in progress with a wait."""
        key = fresh()
        assert store.claim(key, "a", 5.0).status == "claimed"
        second = store.claim(key, "b", 5.0)
        assert second.status == "in_progress"
        assert 0 < second.retry_after_s <= 5.0

    def test_claiming_again_with_the_same_token_is_harmless(self, store: IdempotencyStore) -> None:
        """The holder re-claiming its own key (a retried round trip) still holds it."""
        key = fresh()
        store.claim(key, "a", 5.0)
        assert store.claim(key, "a", 5.0).status == "claimed"
        assert store.complete(key, "a", "1", None)

    def test_a_completed_key_answers_with_its_result(self, store: IdempotencyStore) -> None:
        """After ``complete`` every claim gets ``done`` with the stored text."""
        key = fresh()
        store.claim(key, "a", 5.0)
        assert store.complete(key, "a", '{"paid": 7}', 60.0) is True
        answer = store.claim(key, "b", 5.0)
        assert (answer.status, answer.result) == ("done", '{"paid": 7}')

    def test_only_the_holder_completes_or_releases(self, store: IdempotencyStore) -> None:
        """Another token can neither store a result nor drop the claim."""
        key = fresh()
        store.claim(key, "a", 5.0)
        assert store.complete(key, "b", "x", None) is False
        assert store.release(key, "b") is False
        assert store.claim(key, "c", 5.0).status == "in_progress"

    def test_release_lets_the_next_caller_run(self, store: IdempotencyStore) -> None:
        """A failed call's released claim can be claimed again."""
        key = fresh()
        store.claim(key, "a", 5.0)
        assert store.release(key, "a") is True
        assert store.claim(key, "b", 5.0).status == "claimed"

    def test_release_never_drops_a_result(self, store: IdempotencyStore) -> None:
        """Releasing after completion changes nothing."""
        key = fresh()
        store.claim(key, "a", 5.0)
        store.complete(key, "a", "r", None)
        assert store.release(key, "a") is False
        assert store.claim(key, "b", 5.0).status == "done"

    def test_an_expired_claim_is_taken_over(self, store: IdempotencyStore) -> None:
        """A holder that died frees its key after the claim TTL; its late result is refused."""
        key = fresh()
        store.claim(key, "dead", 0.2)
        time.sleep(0.3)
        assert store.claim(key, "next", 5.0).status == "claimed"
        assert store.complete(key, "dead", "stale", None) is False
        assert store.complete(key, "next", "fresh", None) is True
        assert store.claim(key, "other", 5.0).result == "fresh"

    def test_a_result_expires_after_its_ttl(self, store: IdempotencyStore) -> None:
        """A result kept for 0.2 s no longer answers after 0.3 s."""
        key = fresh()
        store.claim(key, "a", 5.0)
        store.complete(key, "a", "r", 0.2)
        time.sleep(0.3)
        assert store.claim(key, "b", 5.0).status == "claimed"

    def test_forget_deletes_a_key(self, store: IdempotencyStore) -> None:
        """An operator ``forget`` lets the key run again."""
        key = fresh()
        store.claim(key, "a", 5.0)
        store.complete(key, "a", "r", None)
        assert store.forget(key) is True
        assert store.forget(key) is False
        assert store.claim(key, "b", 5.0).status == "claimed"

    def test_racing_threads_claim_exactly_once(self, store: IdempotencyStore) -> None:
        """Twelve threads claiming one key at once: exactly one wins."""
        key = fresh()
        barrier = threading.Barrier(12)
        results: list[str] = []
        lock = threading.Lock()

        def run(index: int) -> None:
            barrier.wait(timeout=10)
            status = store.claim(key, f"t{index}", 5.0).status
            with lock:
                results.append(status)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        assert sorted(results) == ["claimed"] + ["in_progress"] * 11

    def test_the_decorator_runs_once_per_key(self, store: IdempotencyStore) -> None:
        """``@idempotent`` on this store runs the body once and replays the result."""
        calls: list[int] = []
        name = fresh()

        @idempotent(store, key=lambda order, amount: str(order), name=name)
        def charge(order: int, amount: int) -> dict[str, int]:
            calls.append(order)
            return {"order": order, "amount": amount}

        assert charge(7, 10) == {"order": 7, "amount": 10}
        assert charge(7, 99) == {"order": 7, "amount": 10}
        assert charge(8, 1) == {"order": 8, "amount": 1}
        assert calls == [7, 8]

    def test_the_decorator_refuses_a_concurrent_duplicate(self, store: IdempotencyStore) -> None:
        """A second call while the first runs raises ``IdempotencyInProgressError``."""
        name = fresh()
        inside = threading.Event()
        leave = threading.Event()

        @idempotent(store, key=lambda: "one", name=name)
        def slow() -> str:
            inside.set()
            leave.wait(5)
            return "done"

        first = threading.Thread(target=slow)
        first.start()
        assert inside.wait(5)
        with pytest.raises(IdempotencyInProgressError) as info:
            slow()
        assert info.value.retry_after_s > 0
        leave.set()
        first.join(timeout=5)
        assert slow() == "done"
