"""The SQLite outbox's range leases: the same answers as per-row leases, in fewer writes.

The model test drives a ``MemoryOutboxStore`` (a lease stamped on every row) and a
``SQLiteOutboxStore`` (a lease range per claimed run) through the same random operations
by three relays and a moving clock, and expects every answer to match. The examples
below it pin the cases a range can get wrong: a run that must not span another owner's
row, a requeued row under a range, a lease written by a version before ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.eda.outbox_contract import FakeClock
from xsm_celery.eda import Envelope, MemoryOutboxStore, SQLiteOutboxStore

OWNERS = ("relay-a", "relay-b", "relay-c")
#: Few rows and few owners, so random operations keep meeting each other's leases.
ROWS = 10


def _env(n: int) -> Envelope:
    return Envelope.new(type="order.paid", subject=f"o-{n}", data={"n": n})


def _leases(outbox: SQLiteOutboxStore) -> list[tuple[int, int, str]]:
    rows = outbox.db.query(
        "SELECT first_seq, last_seq, owner FROM xsm_outbox_lease ORDER BY first_seq"
    )
    return [tuple(row) for row in rows]


#: Two relays meet most often; a third cuts their ranges now and then.
owners = st.sampled_from((*OWNERS[:2], *OWNERS))
seqs = st.integers(1, ROWS)
seq_lists = st.lists(seqs, min_size=1, max_size=5)


class RangeAgainstRowLeases(RuleBasedStateMachine):
    """Every claim, release, mark, refusal and requeue answers as the per-row model does.

    The relays mostly hand back, mark or refuse what they took last (what a relay does),
    sometimes after their lease ran out and another relay took those rows; sequence
    numbers drawn at random would rarely meet a lease at all.
    """

    def __init__(self) -> None:
        super().__init__()
        self.model_clock, self.clock = FakeClock(), FakeClock()
        self.model = MemoryOutboxStore(clock=self.model_clock)
        self.outbox = SQLiteOutboxStore(":memory:", clock=self.clock)
        self.added = 0
        self.taken: dict[str, list[int]] = {}

    def _both(self, call: Callable[[Any], object]) -> object:
        expected, got = call(self.model), call(self.outbox)
        assert got == expected
        return got

    @rule(n=st.integers(1, 4))
    def add(self, n: int) -> None:
        """Append rows."""
        envs = [_env(self.added + i) for i in range(n)]
        self.added += n
        self._both(lambda store: [store.add("orders", env) for env in envs])

    @rule(owner=owners, limit=st.integers(0, 6), lease_s=st.sampled_from([5.0, 30.0]))
    def claim(self, owner: str, limit: int, lease_s: float) -> None:
        """A relay claims a batch."""
        got = self._both(lambda store: [r.seq for r in store.claim(limit, owner, lease_s)])
        assert isinstance(got, list)
        self.taken[owner] = got

    @rule(seconds=st.sampled_from([1.0, 6.0, 31.0]))
    def advance(self, seconds: float) -> None:
        """Time passes; leases may run out."""
        self.model_clock.advance(seconds)
        self.clock.advance(seconds)

    @rule(owner=owners)
    def release_taken(self, owner: str) -> None:
        """A relay hands back what it took."""
        rows = self.taken.get(owner, [])
        self._both(lambda store: store.release(rows, owner))

    @rule(owner=owners)
    def mark_taken(self, owner: str) -> None:
        """A relay marks what it took as sent."""
        rows = self.taken.pop(owner, [])
        self._both(lambda store: store.mark_sent(rows))

    @rule(owner=owners, max_attempts=st.integers(1, 3))
    def refuse_taken(self, owner: str, max_attempts: int) -> None:
        """The broker refuses the first row a relay took."""
        row = (self.taken.get(owner) or [1])[0]
        self._both(lambda store: store.record_refusal(row, owner, "no", max_attempts=max_attempts))

    @rule(owner=owners, rows=seq_lists)
    def release(self, owner: str, rows: list[int]) -> None:
        """Any rows handed back by any owner."""
        self._both(lambda store: store.release(rows, owner))

    @rule(rows=seq_lists)
    def mark_sent(self, rows: list[int]) -> None:
        """Any rows marked sent."""
        self._both(lambda store: store.mark_sent(rows))

    @rule(seq=seqs)
    def requeue(self, seq: int) -> None:
        """A failed row put back."""
        self._both(lambda store: store.requeue(seq))

    @invariant()
    def same_rows_wait(self) -> None:
        """The same rows are pending, and the same are failed."""
        self._both(lambda store: [r.seq for r in store.pending(100)])
        self._both(lambda store: [r.seq for r in store.failed(100)])


RangeAgainstRowLeases.TestCase.settings = settings(
    max_examples=200, stateful_step_count=30, deadline=None
)
test_range_leases_answer_as_row_leases_do = RangeAgainstRowLeases.TestCase


def test_a_run_never_spans_another_owners_row() -> None:
    """Rows claimed around another relay's row are two ranges, not one across it."""
    outbox = SQLiteOutboxStore(":memory:", clock=FakeClock())
    for n in range(6):
        outbox.add("orders", _env(n))
    assert [r.seq for r in outbox.claim(3, "relay-a", 30)] == [1, 2, 3]
    assert outbox.release([1, 3], "relay-a") == 2
    assert [r.seq for r in outbox.claim(10, "relay-b", 30)] == [1, 3, 4, 5, 6]
    assert _leases(outbox) == [(1, 1, "relay-b"), (2, 2, "relay-a"), (3, 6, "relay-b")]
    assert outbox.record_refusal(2, "relay-b", "refused", max_attempts=5) == 0
    assert outbox.record_refusal(2, "relay-a", "refused", max_attempts=5) == 1
    assert [r.seq for r in outbox.claim(10, "relay-c", 30)] == [2]


def test_a_requeued_row_under_another_range_is_free_at_once() -> None:
    """A row that failed inside a later claim's range is nobody's once requeued."""
    outbox = SQLiteOutboxStore(":memory:", clock=FakeClock())
    for n in range(3):
        outbox.add("orders", _env(n))
    outbox.claim(3, "relay-a", 30)
    assert outbox.record_refusal(2, "relay-a", "refused", max_attempts=1) == 1
    outbox.release([1, 3], "relay-a")
    assert [r.seq for r in outbox.claim(10, "relay-b", 30)] == [1, 3]
    assert _leases(outbox) == [(1, 3, "relay-b")]
    assert outbox.requeue(2)
    assert [r.seq for r in outbox.claim(10, "relay-c", 30)] == [2]


def test_a_lease_stamped_by_an_older_version_is_respected(tmp_path: Path) -> None:
    """A row an older relay leased in its own columns is skipped until released or expired."""
    clock = FakeClock()
    outbox = SQLiteOutboxStore(tmp_path / "o.db", clock=clock)
    for n in range(3):
        outbox.add("orders", _env(n))
    outbox.db.write(
        "UPDATE xsm_outbox SET claimed_by = 'old-relay', claimed_until = ? WHERE seq = 2",
        (clock() + 30,),
    )
    assert [r.seq for r in outbox.claim(10, "relay-b", 30)] == [1, 3]
    assert outbox.release([2], "old-relay") == 1
    assert [r.seq for r in outbox.claim(10, "relay-c", 30)] == [2]
    clock.advance(31)
    outbox.db.write("UPDATE xsm_outbox SET claimed_by = 'old-relay' WHERE seq = 1")
    assert [r.seq for r in outbox.claim(10, "relay-d", 30)] == [1, 2, 3]
    assert outbox.release([1], "old-relay") == 0


def test_a_drained_outbox_keeps_no_lease() -> None:
    """Marking a batch sent drops its range: the lease table stays as small as the work."""
    clock = FakeClock()
    outbox = SQLiteOutboxStore(":memory:", clock=clock)
    for n in range(50):
        outbox.add("orders", _env(n))
    for _ in range(5):
        rows = outbox.claim(10, "relay-a", 30)
        assert _leases(outbox) == [(rows[0].seq, rows[-1].seq, "relay-a")]
        outbox.mark_sent([r.seq for r in rows])
        assert _leases(outbox) == []
    assert outbox.count(pending_only=True) == 0


def test_a_dead_relays_range_shrinks_as_others_take_its_rows() -> None:
    """An expired range is cut where another relay takes rows, and gone once they are sent."""
    clock = FakeClock()
    outbox = SQLiteOutboxStore(":memory:", clock=clock)
    for n in range(10):
        outbox.add("orders", _env(n))
    outbox.claim(10, "dead-relay", 30)
    clock.advance(31)
    taken = outbox.claim(4, "relay-b", 30)
    assert _leases(outbox) == [(1, 4, "relay-b"), (5, 10, "dead-relay")]
    assert outbox.release([r.seq for r in taken], "dead-relay") == 0
    outbox.mark_sent([r.seq for r in taken])
    outbox.mark_sent([r.seq for r in outbox.claim(10, "relay-b", 30)])
    assert _leases(outbox) == []


def test_claiming_own_rows_again_gives_them_the_new_lease_only() -> None:
    """A relay's second, shorter claim of its rows ends when that lease ends, not the first."""
    clock = FakeClock()
    outbox = SQLiteOutboxStore(":memory:", clock=clock)
    outbox.add("orders", _env(0))
    assert [r.seq for r in outbox.claim(1, "relay-a", 30)] == [1]
    assert [r.seq for r in outbox.claim(1, "relay-a", 5)] == [1]
    assert _leases(outbox) == [(1, 1, "relay-a")]
    clock.advance(6)
    assert [r.seq for r in outbox.claim(1, "relay-b", 5)] == [1]
