"""MemoryInbox and SQLiteInbox: claim once, mark receipts, release, expiry, forget."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from xsm_celery.persistence import Inbox, MemoryInbox, SQLiteInbox, SQLiteStore, fingerprint


class InboxContract:
    """What every inbox does; subclasses provide an ``inbox`` fixture."""

    def test_first_claim_wins(self, inbox: Any) -> None:
        """Only the first claim of a key succeeds."""
        assert inbox.claim("s", "k", "fp", ttl_s=None) is True
        assert inbox.claim("s", "k", "fp", ttl_s=None) is False
        assert inbox.get("s", "k").receipt is None

    def test_scopes_are_separate(self, inbox: Any) -> None:
        """The same key in two scopes is two entries."""
        assert inbox.claim("a", "k", "fp", ttl_s=None)
        assert inbox.claim("b", "k", "fp", ttl_s=None)

    def test_mark_stores_the_receipt(self, inbox: Any) -> None:
        """A marked key answers with its receipt and keeps its fingerprint."""
        inbox.claim("s", "k", "fp", ttl_s=None)
        inbox.mark("s", "k", '{"ok":1}', ttl_s=None)
        entry = inbox.get("s", "k")
        assert entry.receipt == '{"ok":1}'
        assert entry.fingerprint == "fp"

    def test_release_only_drops_in_flight_claims(self, inbox: Any) -> None:
        """release() frees an in-flight key but keeps a completed one."""
        inbox.claim("s", "k", "fp", ttl_s=None)
        inbox.release("s", "k")
        assert inbox.get("s", "k") is None
        assert inbox.claim("s", "k", "fp", ttl_s=None)
        inbox.mark("s", "k", "r", ttl_s=None)
        inbox.release("s", "k")
        assert inbox.get("s", "k").receipt == "r"

    def test_expired_entries_are_gone(self, inbox: Any) -> None:
        """An entry past its TTL is invisible, claimable again, and purged."""
        inbox.claim("s", "k", "fp", ttl_s=0.001)
        time.sleep(0.01)
        assert inbox.get("s", "k") is None
        assert inbox.claim("s", "k", "fp", ttl_s=0.001)
        inbox.claim("s", "other", "fp", ttl_s=None)
        assert inbox.purge_expired(now=time.time() + 1) == 1
        assert inbox.get("s", "other") is not None

    def test_forget_a_scope(self, inbox: Any) -> None:
        """forget() deletes every entry of one scope only."""
        inbox.claim("a", "1", "fp", ttl_s=None)
        inbox.claim("a", "2", "fp", ttl_s=None)
        inbox.claim("b", "1", "fp", ttl_s=None)
        assert inbox.forget("a") == 2
        assert inbox.get("b", "1") is not None

    def test_concurrent_claims_have_one_winner(self, inbox: Any) -> None:
        """Of many threads claiming one key at once, exactly one wins."""
        wins: list[bool] = []
        barrier = threading.Barrier(8)

        def claim() -> None:
            barrier.wait()
            wins.append(inbox.claim("s", "k", "fp", ttl_s=None))

        threads = [threading.Thread(target=claim) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert wins.count(True) == 1


class TestMemoryInbox(InboxContract):
    """MemoryInbox runs the inbox contract."""

    @pytest.fixture
    def inbox(self) -> MemoryInbox:
        """A fresh memory inbox."""
        return MemoryInbox()


class TestSQLiteInbox(InboxContract):
    """SQLiteInbox runs the inbox contract."""

    @pytest.fixture
    def inbox(self, tmp_path: Path) -> SQLiteInbox:
        """A fresh SQLite inbox in its own file."""
        return SQLiteInbox(tmp_path / "inbox.db")


def test_inboxes_satisfy_the_protocol(tmp_path: Path) -> None:
    """Both inboxes are Inboxes."""
    assert isinstance(MemoryInbox(), Inbox)
    assert isinstance(SQLiteInbox(tmp_path / "i.db"), Inbox)


def test_sqlite_inbox_shares_the_store_transaction(tmp_path: Path) -> None:
    """A receipt written inside the store's lock rolls back with the snapshot."""
    store = SQLiteStore(tmp_path / "s.db")
    inbox = SQLiteInbox(store)

    def write_then_fail() -> None:
        with store.lock("k"):
            store.save("k", "{}")
            inbox.claim("s", "e-1", "fp", ttl_s=None)
            inbox.mark("s", "e-1", "r", ttl_s=None)
            raise RuntimeError("forced")

    with pytest.raises(RuntimeError):
        write_then_fail()
    assert inbox.get("s", "e-1") is None


def test_fingerprint_is_stable_and_content_sensitive() -> None:
    """Equal events give equal fingerprints whatever the key order; other content differs."""
    assert fingerprint("PAY", {"a": 1, "b": 2}) == fingerprint("PAY", {"b": 2, "a": 1})
    assert fingerprint("PAY", {"a": 1}) != fingerprint("PAY", {"a": 2})
    assert fingerprint("PAY", {}) != fingerprint("REFUND", {})


@pytest.mark.parametrize("ttl", [-1, float("nan"), float("inf"), "60", True])
def test_every_inbox_refuses_the_same_bad_ttl(ttl: object) -> None:
    """The one expiry helper refuses negative, NaN, infinite and non-numeric TTLs alike."""
    from xsm_celery.persistence.inbox import expiry_time

    with pytest.raises(ValueError, match="ttl_s must be None or a finite number"):
        expiry_time(ttl, 1_700_000_000.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl_s must be None or a finite number"):
        MemoryInbox().claim("s", "k", "fp", ttl_s=ttl)  # type: ignore[arg-type]


def test_expiry_is_now_plus_ttl_or_never() -> None:
    """None never expires; a number of seconds is added to the write time."""
    from xsm_celery.persistence.inbox import expiry_time

    assert expiry_time(None, 100.0) is None
    assert expiry_time(0, 100.0) == 100.0
    assert expiry_time(2.5, 100.0) == 102.5
