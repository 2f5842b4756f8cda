"""DjangoInbox: one winner per key, receipts for redeliveries, expiry and purge."""

from __future__ import annotations

import pytest

from tests.django.clock import Wall
from xsm_celery.django.stores import DjangoInbox
from xsm_celery.persistence import InboxEntry


@pytest.fixture
def wall() -> Wall:
    """A settable clock."""
    return Wall()


@pytest.fixture
def inbox(db_alias: str, wall: Wall) -> DjangoInbox:
    """An empty inbox on each database."""
    return DjangoInbox(using=db_alias, wall=wall)


def test_only_the_first_claim_wins(inbox: DjangoInbox) -> None:
    """A second claim of a live key loses; the entry is in flight with no receipt."""
    assert inbox.claim("src", "e-1", "fp", ttl_s=60) is True
    assert inbox.claim("src", "e-1", "fp", ttl_s=60) is False
    assert inbox.get("src", "e-1") == InboxEntry("fp", None, 1_700_000_060.0)


def test_scopes_are_separate(inbox: DjangoInbox) -> None:
    """The same key under two scopes is two entries."""
    assert inbox.claim("a", "e-1", "fp", ttl_s=None)
    assert inbox.claim("b", "e-1", "fp", ttl_s=None)


def test_mark_stores_the_receipt_and_keeps_the_fingerprint(inbox: DjangoInbox) -> None:
    """After mark(), get() answers with the receipt; a receipt survives release()."""
    inbox.claim("src", "e-1", "fp-1", ttl_s=None)
    inbox.mark("src", "e-1", '{"ok": true}', ttl_s=None)
    inbox.release("src", "e-1")
    assert inbox.get("src", "e-1") == InboxEntry("fp-1", '{"ok": true}', None)


def test_release_drops_an_in_flight_claim(inbox: DjangoInbox) -> None:
    """A failed attempt releases its claim so a redelivery can claim again."""
    inbox.claim("src", "e-1", "fp", ttl_s=None)
    inbox.release("src", "e-1")
    assert inbox.get("src", "e-1") is None
    assert inbox.claim("src", "e-1", "fp", ttl_s=None) is True


def test_an_expired_entry_is_absent_and_can_be_claimed(inbox: DjangoInbox, wall: Wall) -> None:
    """Past its ttl an entry no longer counts; a new claim takes it over."""
    inbox.claim("src", "e-1", "old", ttl_s=10)
    wall.advance(10)
    assert inbox.get("src", "e-1") is None
    assert inbox.claim("src", "e-1", "new", ttl_s=10) is True
    entry = inbox.get("src", "e-1")
    assert entry is not None
    assert entry.fingerprint == "new"


def test_purge_and_forget(inbox: DjangoInbox, wall: Wall) -> None:
    """purge_expired() removes only expired entries; forget() removes a whole scope."""
    inbox.claim("a", "short", "fp", ttl_s=5)
    inbox.claim("a", "forever", "fp", ttl_s=None)
    inbox.claim("b", "x", "fp", ttl_s=None)
    assert inbox.purge_expired(now=wall.now + 6) == 1
    assert inbox.forget("a") == 1
    assert len(inbox) == 1


def test_a_negative_ttl_is_refused(inbox: DjangoInbox) -> None:
    """ttl_s below zero is a ValueError rather than an entry born expired."""
    with pytest.raises(ValueError, match="ttl_s"):
        inbox.claim("src", "e-1", "fp", ttl_s=-1)
