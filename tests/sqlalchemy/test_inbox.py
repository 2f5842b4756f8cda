"""SQLAlchemyInbox on SQLite and PostgreSQL: claims, receipts, expiry, shared transactions."""

from __future__ import annotations

import threading

import pytest

from tests.eda.outbox_contract import FakeClock
from tests.sqlalchemy.test_snapshots import Database, database  # noqa: F401 - fixture
from xsm_celery.persistence.protocols import Inbox
from xsm_celery.sqlalchemy.inbox import SQLAlchemyInbox
from xsm_celery.sqlalchemy.snapshots import SQLAlchemyStore


def test_inbox_satisfies_the_protocol(database: Database) -> None:  # noqa: F811
    """SQLAlchemyInbox is an Inbox as persistence.protocols defines it."""
    assert isinstance(SQLAlchemyInbox(database()), Inbox)


def test_first_claim_wins_and_a_receipt_answers_later_ones(database: Database) -> None:  # noqa: F811
    """One claim wins; after mark() the entry carries the receipt and its fingerprint."""
    inbox = SQLAlchemyInbox(database())
    assert inbox.get("src", "id-1") is None
    assert inbox.claim("src", "id-1", "fp", ttl_s=None) is True
    assert inbox.claim("src", "id-1", "fp", ttl_s=None) is False
    entry = inbox.get("src", "id-1")
    assert entry is not None
    assert (entry.fingerprint, entry.receipt) == ("fp", None)
    inbox.mark("src", "id-1", '{"ok": true}', ttl_s=None)
    entry = inbox.get("src", "id-1")
    assert entry is not None
    assert (entry.fingerprint, entry.receipt) == ("fp", '{"ok": true}')


def test_scopes_are_separate(database: Database) -> None:  # noqa: F811
    """The same key under two scopes (principals) is two entries."""
    inbox = SQLAlchemyInbox(database())
    assert inbox.claim("a", "id-1", "fp", ttl_s=None)
    assert inbox.claim("b", "id-1", "fp", ttl_s=None)
    assert inbox.forget("a") == 1
    assert inbox.get("a", "id-1") is None
    assert inbox.get("b", "id-1") is not None


def test_release_drops_only_an_unfinished_claim(database: Database) -> None:  # noqa: F811
    """release() lets a redelivery claim again, but never erases a receipt."""
    inbox = SQLAlchemyInbox(database())
    inbox.claim("s", "k1", "fp", ttl_s=None)
    inbox.release("s", "k1")
    assert inbox.claim("s", "k1", "fp", ttl_s=None) is True
    inbox.mark("s", "k1", "r", ttl_s=None)
    inbox.release("s", "k1")
    assert inbox.claim("s", "k1", "fp", ttl_s=None) is False


def test_expired_entries_are_claimable_and_purged(database: Database) -> None:  # noqa: F811
    """An entry past its TTL is gone for get/claim and removed by purge_expired."""
    clock = FakeClock()
    inbox = SQLAlchemyInbox(database(), clock=clock)
    inbox.claim("s", "k1", "fp", ttl_s=10)
    inbox.claim("s", "k2", "fp", ttl_s=100)
    clock.advance(11)
    assert inbox.get("s", "k1") is None
    assert inbox.claim("s", "k1", "fp2", ttl_s=10) is True
    clock.advance(100)
    assert inbox.purge_expired() == 2


def test_mark_without_claim_creates_the_entry(database: Database) -> None:  # noqa: F811
    """mark() alone records a receipt (a store may skip the claim step)."""
    inbox = SQLAlchemyInbox(database())
    inbox.mark("s", "k", "receipt", ttl_s=None)
    entry = inbox.get("s", "k")
    assert entry is not None
    assert entry.receipt == "receipt"


def test_receipt_rolls_back_with_the_snapshot(database: Database) -> None:  # noqa: F811
    """A receipt written inside a failing lock block is undone with the snapshot."""
    store = SQLAlchemyStore(database())
    inbox = SQLAlchemyInbox(store)

    def step() -> None:
        with store.lock("o-1"):
            inbox.claim("s", "id-1", "fp", ttl_s=None)
            inbox.mark("s", "id-1", "r", ttl_s=None)
            store.save("o-1", "{}")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        step()
    assert inbox.get("s", "id-1") is None


def test_concurrent_claims_have_one_winner(database: Database) -> None:  # noqa: F811
    """Eight consumers claiming one key at once: exactly one wins."""
    results: list[bool] = []
    barrier = threading.Barrier(8)
    inboxes = [SQLAlchemyInbox(database()) for _ in range(8)]

    def claim(mine: SQLAlchemyInbox) -> None:
        barrier.wait(10)
        results.append(mine.claim("s", "same", "fp", ttl_s=None))

    threads = [threading.Thread(target=claim, args=(inbox,)) for inbox in inboxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [False] * 7 + [True]
