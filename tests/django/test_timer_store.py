"""DjangoTimerStore: due timers in order, scanner leases, deletion by id and by instance."""

from __future__ import annotations

import pytest

from xsm_celery.django.stores import DjangoTimerStore

NOW = 1_700_000_000.0


@pytest.fixture
def timers(db_alias: str) -> DjangoTimerStore:
    """An empty timer store on each database."""
    return DjangoTimerStore(using=db_alias)


def test_due_returns_only_due_timers_earliest_first(timers: DjangoTimerStore) -> None:
    """Timers due at or before now come back earliest first, with their payload."""
    late = timers.schedule("job-1", NOW + 60, {"event": "RETRY"})
    second = timers.schedule("job-2", NOW, {"event": "RETRY", "n": [1]})
    first = timers.schedule("job-3", NOW - 10, {})
    due = timers.due(NOW)
    assert [t.id for t in due] == [first, second]
    assert due[1].payload == {"event": "RETRY", "n": [1]}
    assert due[1].key == "job-2"
    assert due[1].due_at == NOW
    assert late not in {t.id for t in timers.due(NOW, limit=1)}


def test_claims_skip_other_scanners_until_the_lease_ends(timers: DjangoTimerStore) -> None:
    """A leased timer is skipped by another owner, taken back by its own, free after expiry."""
    timer_id = timers.schedule("job-1", NOW, {})
    assert [t.id for t in timers.claim(NOW, 10, "beat-a", lease_s=30)] == [timer_id]
    assert timers.claim(NOW + 1, 10, "beat-b", lease_s=30) == []
    assert [t.id for t in timers.claim(NOW + 1, 10, "beat-a", lease_s=30)] == [timer_id]
    assert [t.id for t in timers.claim(NOW + 32, 10, "beat-b", lease_s=30)] == [timer_id]


def test_release_hands_a_lease_back(timers: DjangoTimerStore) -> None:
    """After release, another scanner can claim the timer at once."""
    timer_id = timers.schedule("job-1", NOW, {})
    timers.claim(NOW, 10, "beat-a")
    assert timers.release([timer_id], "beat-b") == 0
    assert timers.release([timer_id], "beat-a") == 1
    assert len(timers.claim(NOW, 10, "beat-b")) == 1


def test_delete_and_delete_key(timers: DjangoTimerStore) -> None:
    """delete() removes one timer once; delete_key() removes every timer of an instance."""
    one = timers.schedule("job-1", NOW, {})
    timers.schedule("job-2", NOW, {})
    timers.schedule("job-2", NOW + 5, {})
    assert timers.delete(one) is True
    assert timers.delete(one) is False
    assert timers.delete_key("job-2") == 2
    assert timers.count() == 0


@pytest.mark.parametrize("due_at", [float("nan"), float("inf"), "soon"])
def test_a_bad_due_time_is_refused(timers: DjangoTimerStore, due_at: object) -> None:
    """A non-finite or non-numeric due time is a ValueError, not a timer that never fires."""
    with pytest.raises(ValueError, match="due_at_wall"):
        timers.schedule("job-1", due_at, {})  # type: ignore[arg-type]
