"""The outbox store contract, as a reusable test class every OutboxStore runs.

Subclass it and provide an ``outbox_factory`` fixture: a callable that takes an
epoch-seconds ``clock`` callable and returns a fresh, empty store using it::

    class TestSQLAlchemyOutbox(OutboxStoreContract):
        @pytest.fixture
        def outbox_factory(self, engine):
            return lambda clock: SQLAlchemyOutboxStore(engine, clock=clock)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from xsm_celery.eda import Envelope

__all__ = ["FakeClock", "OutboxStoreContract"]


class FakeClock:
    """An epoch-seconds clock that moves only when told."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += seconds


def _env(n: int) -> Envelope:
    return Envelope.new(type="order.paid", subject=f"o-{n}", data={"n": n})


class OutboxStoreContract:
    """What every outbox store does: order, leases, release, marks, purge, count, refusals."""

    @pytest.fixture
    def clock(self) -> FakeClock:
        """A controllable clock."""
        return FakeClock()

    @pytest.fixture
    def outbox(self, outbox_factory: Callable[[FakeClock], Any], clock: FakeClock) -> Any:
        """A fresh store on the fake clock."""
        return outbox_factory(clock)

    def _fill(self, outbox: Any, n: int, topic: str = "orders") -> list[Envelope]:
        envs = [_env(i) for i in range(n)]
        for env in envs:
            outbox.add(topic, env)
        return envs

    def test_add_returns_increasing_seqs(self, outbox: Any) -> None:
        """Sequence numbers grow with every add."""
        seqs = [outbox.add("t", _env(i)) for i in range(3)]
        assert seqs == sorted(seqs)
        assert len(set(seqs)) == 3

    def test_pending_is_in_order_and_round_trips(self, outbox: Any) -> None:
        """pending() returns unsent rows oldest first, envelopes unchanged."""
        envs = self._fill(outbox, 5)
        rows = outbox.pending(limit=3)
        assert [r.envelope for r in rows] == envs[:3]
        assert {r.topic for r in rows} == {"orders"}

    def test_claim_skips_rows_under_another_live_lease(self, outbox: Any) -> None:
        """A second owner never gets rows leased to the first while the lease lives."""
        self._fill(outbox, 10)
        a = outbox.claim(4, "relay-a", 30)
        b = outbox.claim(100, "relay-b", 30)
        assert len(a) == 4
        assert len(b) == 6
        assert {r.seq for r in a}.isdisjoint({r.seq for r in b})

    def test_claim_returns_own_leased_rows_again(self, outbox: Any) -> None:
        """An owner that claims again gets its own leased rows back at once."""
        self._fill(outbox, 3)
        first = outbox.claim(3, "relay-a", 30)
        again = outbox.claim(3, "relay-a", 30)
        assert [r.seq for r in again] == [r.seq for r in first]

    def test_expired_lease_is_taken_by_another(self, outbox: Any, clock: FakeClock) -> None:
        """A dead relay's rows are claimed by another once its lease expires."""
        self._fill(outbox, 3)
        held = outbox.claim(3, "relay-a", 30)
        assert outbox.claim(3, "relay-b", 30) == []
        clock.advance(31)
        taken = outbox.claim(3, "relay-b", 30)
        assert [r.seq for r in taken] == [r.seq for r in held]

    def test_release_hands_rows_back(self, outbox: Any) -> None:
        """Released rows can be claimed by another owner at once."""
        self._fill(outbox, 3)
        held = outbox.claim(3, "relay-a", 30)
        assert outbox.release([r.seq for r in held], "relay-b") == 0
        assert outbox.release([r.seq for r in held], "relay-a") == 3
        assert len(outbox.claim(3, "relay-b", 30)) == 3

    def test_mark_sent_removes_from_pending(self, outbox: Any) -> None:
        """Sent rows are never pending or claimable again."""
        self._fill(outbox, 3)
        rows = outbox.claim(2, "relay-a", 30)
        assert outbox.mark_sent([r.seq for r in rows]) == 2
        assert outbox.mark_sent([r.seq for r in rows]) == 0
        assert [r.seq for r in outbox.pending()] == [rows[-1].seq + 1]
        assert len(outbox.claim(10, "relay-b", 30)) == 1

    def test_count_and_purge_sent(self, outbox: Any, clock: FakeClock) -> None:
        """count() sees every row or only pending ones; purge_sent drops old sent rows."""
        self._fill(outbox, 4)
        outbox.mark_sent([r.seq for r in outbox.pending(limit=3)])
        assert outbox.count() == 4
        assert outbox.count(pending_only=True) == 1
        assert outbox.purge_sent(older_than_s=60) == 0
        clock.advance(61)
        assert outbox.purge_sent(older_than_s=60) == 3
        assert outbox.count() == 1

    def test_claim_refuses_bad_arguments(self, outbox: Any) -> None:
        """Negative limits, empty owners and non-positive leases are refused."""
        with pytest.raises(ValueError):
            outbox.claim(-1, "a", 30)
        with pytest.raises(ValueError):
            outbox.claim(1, "", 30)
        with pytest.raises(ValueError):
            outbox.claim(1, "a", 0)

    def test_topics_are_kept_per_row(self, outbox: Any) -> None:
        """Each row keeps its own topic."""
        outbox.add("a", _env(1))
        outbox.add("b", _env(2))
        assert [r.topic for r in outbox.pending()] == ["a", "b"]

    def test_a_refusal_is_counted_and_the_row_handed_back(self, outbox: Any) -> None:
        """record_refusal counts the owner's row, drops its lease, and keeps it pending."""
        self._fill(outbox, 2)
        first = outbox.claim(1, "relay-a", 30)[0]
        assert (
            outbox.record_refusal(first.seq, "relay-a", "PreconditionFailed: no", max_attempts=3)
            == 1
        )
        assert outbox.count(pending_only=True) == 2
        assert outbox.count(failed_only=True) == 0
        assert outbox.claim(5, "relay-b", 30)[0].seq == first.seq
        assert outbox.record_refusal(first.seq, "relay-b", "again", max_attempts=3) == 2

    def test_only_the_lease_holder_counts_a_refusal(self, outbox: Any) -> None:
        """A refusal by a relay that does not hold the row, or of a sent row, changes nothing."""
        self._fill(outbox, 2)
        a, b = outbox.claim(2, "relay-a", 30)
        assert outbox.record_refusal(a.seq, "relay-b", "not mine", max_attempts=1) == 0
        outbox.mark_sent([b.seq])
        assert outbox.record_refusal(b.seq, "relay-a", "sent already", max_attempts=1) == 0
        assert outbox.count(failed_only=True) == 0
        assert [r.seq for r in outbox.pending()] == [a.seq]

    def test_the_row_is_set_aside_at_max_attempts(self, outbox: Any, clock: FakeClock) -> None:
        """At max_attempts the row is failed: not pending, not claimed, listed with its error."""
        envs = self._fill(outbox, 3)
        bad = outbox.pending()[1]
        for attempt in range(1, 4):
            outbox.claim(3, "relay-a", 30)
            assert (
                outbox.record_refusal(bad.seq, "relay-a", f"refused #{attempt}", max_attempts=3)
                == attempt
            )
            outbox.release([r.seq for r in outbox.pending()], "relay-a")
        assert [r.envelope for r in outbox.pending()] == [envs[0], envs[2]]
        assert [r.envelope for r in outbox.claim(10, "relay-b", 30)] == [envs[0], envs[2]]
        assert outbox.count() == 3
        assert outbox.count(pending_only=True) == 2
        assert outbox.count(failed_only=True) == 1
        [failed] = outbox.failed()
        assert (failed.seq, failed.topic, failed.envelope) == (bad.seq, "orders", envs[1])
        assert (failed.attempts, failed.last_error, failed.failed_at) == (
            3,
            "refused #3",
            clock.now,
        )
        clock.advance(10_000)
        assert outbox.purge_sent(older_than_s=1) == 0, "a failed row is not sent: never purged"
        assert outbox.record_refusal(bad.seq, "relay-b", "late", max_attempts=3) == 0

    def test_failed_rows_are_not_the_oldest_pending(self, outbox: Any, clock: FakeClock) -> None:
        """oldest_pending_at skips a failed row, so the backlog age alert clears."""
        self._fill(outbox, 1)
        clock.advance(60)
        self._fill(outbox, 1)
        first = outbox.claim(1, "relay-a", 30)[0]
        outbox.record_refusal(first.seq, "relay-a", "refused", max_attempts=1)
        assert outbox.oldest_pending_at() == clock.now

    def test_requeue_makes_a_failed_row_pending_in_order(self, outbox: Any) -> None:
        """requeue resets the attempts; the row goes out before the rows added after it."""
        envs = self._fill(outbox, 3)
        first = outbox.claim(1, "relay-a", 30)[0]
        assert outbox.record_refusal(first.seq, "relay-a", "refused", max_attempts=1) == 1
        assert outbox.requeue(first.seq) is True
        assert outbox.requeue(first.seq) is False, "only a failed row is requeued"
        assert outbox.requeue(outbox.pending()[1].seq) is False
        assert [r.envelope for r in outbox.pending()] == envs
        assert outbox.failed() == []
        outbox.claim(1, "relay-a", 30)
        assert outbox.record_refusal(first.seq, "relay-a", "again", max_attempts=5) == 1

    def test_failed_lists_in_order_up_to_the_limit(self, outbox: Any) -> None:
        """failed(limit) returns the oldest failed rows first; a long error is cut, not refused."""
        self._fill(outbox, 4)
        rows = outbox.claim(4, "relay-a", 30)
        for row in rows[:3]:
            outbox.record_refusal(row.seq, "relay-a", "x" * 10_000, max_attempts=1)
        listed = outbox.failed(limit=2)
        assert [r.seq for r in listed] == [r.seq for r in rows[:2]]
        assert 0 < len(listed[0].last_error) <= 10_000
        assert outbox.failed(limit=0) == []
        with pytest.raises(ValueError):
            outbox.failed(limit=-1)

    def test_record_refusal_refuses_bad_arguments(self, outbox: Any) -> None:
        """max_attempts below one (or not an int) and an empty owner are refused."""
        self._fill(outbox, 1)
        seq = outbox.claim(1, "a", 30)[0].seq
        for bad in (0, True, 1.5):
            with pytest.raises(ValueError):
                outbox.record_refusal(seq, "a", "e", max_attempts=bad)
        with pytest.raises(ValueError):
            outbox.record_refusal(seq, "", "e", max_attempts=1)
