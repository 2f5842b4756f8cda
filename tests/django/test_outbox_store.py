"""DjangoOutboxStore: ordered pending rows, relay leases, and rows that share the transaction."""

from __future__ import annotations

import pytest
from django.db import transaction

from tests.django.clock import Wall
from xsm_celery.django.stores import DjangoOutboxStore, DjangoSnapshotStore
from xsm_celery.eda import Envelope


@pytest.fixture
def wall() -> Wall:
    """A settable clock."""
    return Wall()


@pytest.fixture
def outbox(db_alias: str, wall: Wall) -> DjangoOutboxStore:
    """An empty outbox on each database."""
    return DjangoOutboxStore(using=db_alias, wall=wall)


def _fill(outbox: DjangoOutboxStore, n: int) -> list[int]:
    return [
        outbox.add("orders", Envelope.new(type="order.paid", subject=f"o-{i}")) for i in range(n)
    ]


def _pay_then_fail(snapshots: DjangoSnapshotStore, outbox: DjangoOutboxStore) -> None:
    snapshots.save("o-1", '{"value": "paid"}')
    outbox.add("orders", Envelope.new(type="order.paid", subject="o-1"))
    raise RuntimeError("forced failure after the write")


def test_rows_come_back_in_order_with_the_same_envelope(outbox: DjangoOutboxStore) -> None:
    """pending() returns the added envelopes unchanged, in increasing sequence order."""
    env = Envelope.new(type="order.paid", subject="o-1", data={"total": 99, "items": [1, 2]})
    first = outbox.add("orders", env)
    second = outbox.add("billing", Envelope.new(type="invoice.sent", subject="o-1"))
    assert second > first
    rows = outbox.pending()
    assert [r.seq for r in rows] == [first, second]
    assert rows[0].topic == "orders"
    assert rows[0].envelope == env


def test_mark_sent_removes_rows_from_pending(outbox: DjangoOutboxStore) -> None:
    """A sent row is no longer pending, and marking it twice changes nothing."""
    seqs = _fill(outbox, 3)
    assert outbox.mark_sent(seqs[:2]) == 2
    assert outbox.mark_sent(seqs[:2]) == 0
    assert [r.seq for r in outbox.pending()] == seqs[2:]
    assert outbox.count() == 3
    assert outbox.count(pending_only=True) == 1


def test_pending_respects_the_limit(outbox: DjangoOutboxStore) -> None:
    """pending(limit) returns the oldest ``limit`` rows; a negative limit is refused."""
    seqs = _fill(outbox, 5)
    assert [r.seq for r in outbox.pending(limit=2)] == seqs[:2]
    with pytest.raises(ValueError, match="limit"):
        outbox.pending(limit=-1)


def test_a_second_relay_skips_rows_under_a_live_lease(outbox: DjangoOutboxStore) -> None:
    """The seed's lease example: B gets only the rows A did not claim, then the rest after release."""
    _fill(outbox, 10)
    held = outbox.claim(limit=4, owner="relay-a", lease_s=30)
    got_b = outbox.claim(limit=100, owner="relay-b", lease_s=30)
    assert len(held) == 4
    assert len(got_b) == 6
    assert {r.seq for r in held}.isdisjoint({r.seq for r in got_b})
    outbox.mark_sent([r.seq for r in got_b])
    assert outbox.release([r.seq for r in held], owner="relay-a") == 4
    assert len(outbox.claim(limit=100, owner="relay-b", lease_s=30)) == 4


def test_an_expired_lease_can_be_taken_over(outbox: DjangoOutboxStore, wall: Wall) -> None:
    """A dead relay's rows go to another relay once its lease has run out."""
    _fill(outbox, 3)
    outbox.claim(limit=3, owner="relay-a", lease_s=30)
    assert outbox.claim(limit=3, owner="relay-b", lease_s=30) == []
    wall.advance(30.5)
    assert len(outbox.claim(limit=3, owner="relay-b", lease_s=30)) == 3


def test_an_owner_reclaims_its_own_rows(outbox: DjangoOutboxStore) -> None:
    """A restarted relay with the same owner gets its leased rows back at once."""
    seqs = _fill(outbox, 2)
    outbox.claim(limit=2, owner="pod-1", lease_s=30)
    assert [r.seq for r in outbox.claim(limit=2, owner="pod-1", lease_s=30)] == seqs


def test_release_only_hands_back_the_owners_leases(outbox: DjangoOutboxStore) -> None:
    """Another owner cannot release a lease it does not hold."""
    seqs = _fill(outbox, 2)
    outbox.claim(limit=2, owner="relay-a", lease_s=30)
    assert outbox.release(seqs, owner="relay-b") == 0


def test_claim_refuses_a_bad_owner_or_lease(outbox: DjangoOutboxStore) -> None:
    """An empty owner or a non-positive lease is a ValueError."""
    with pytest.raises(ValueError, match="owner"):
        outbox.claim(limit=1, owner="")
    with pytest.raises(ValueError, match="lease_s"):
        outbox.claim(limit=1, owner="a", lease_s=0)


def test_purge_sent_deletes_only_old_sent_rows(outbox: DjangoOutboxStore, wall: Wall) -> None:
    """Rows sent longer ago than the window go; pending and recent rows stay."""
    seqs = _fill(outbox, 3)
    outbox.mark_sent([seqs[0]])
    wall.advance(100)
    outbox.mark_sent([seqs[1]])
    assert outbox.purge_sent(older_than_s=50) == 1
    assert outbox.count() == 2


def test_rows_roll_back_with_the_snapshot_inside_atomic(db_alias: str, wall: Wall) -> None:
    """A failure after both writes in transaction.atomic() leaves neither the row nor the state."""
    outbox = DjangoOutboxStore(using=db_alias, wall=wall)
    snapshots = DjangoSnapshotStore(using=db_alias, wall=wall)
    with pytest.raises(RuntimeError), transaction.atomic(using=db_alias):
        _pay_then_fail(snapshots, outbox)
    assert outbox.count() == 0
    assert snapshots.load("o-1") is None


def test_rows_commit_with_the_snapshot_inside_the_lock(db_alias: str, wall: Wall) -> None:
    """Writes inside DjangoSnapshotStore.lock() commit together, and roll back together."""
    outbox = DjangoOutboxStore(using=db_alias, wall=wall)
    snapshots = DjangoSnapshotStore(using=db_alias, wall=wall)
    with snapshots.lock("o-1"):
        snapshots.save("o-1", '{"value": "open"}')
        outbox.add("orders", Envelope.new(type="order.opened", subject="o-1"))
    with pytest.raises(RuntimeError), snapshots.lock("o-1"):
        _pay_then_fail(snapshots, outbox)
    assert [r.envelope.type for r in outbox.pending()] == ["order.opened"]
    loaded = snapshots.load("o-1")
    assert loaded is not None
    assert loaded.snapshot == '{"value": "open"}'
