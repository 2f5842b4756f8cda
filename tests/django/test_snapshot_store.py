"""DjangoSnapshotStore: versions, optimistic conflicts, keys and the transactional lock."""

from __future__ import annotations

import threading

import pytest

from tests.django.clock import Wall
from xsm_celery.django.stores import DjangoSnapshotStore
from xsm_celery.errors import ConflictError, LockTimeoutError
from xsm_celery.persistence import StoredSnapshot


@pytest.fixture
def wall() -> Wall:
    """A settable clock."""
    return Wall()


@pytest.fixture
def store(db_alias: str, wall: Wall) -> DjangoSnapshotStore:
    """An empty snapshot store on each database."""
    return DjangoSnapshotStore(using=db_alias, wall=wall)


def test_versions_start_at_one_and_grow_by_one(store: DjangoSnapshotStore, wall: Wall) -> None:
    """Each save adds one to the version; load returns the last snapshot and its metadata."""
    assert store.save("k", '{"v": 1}') == 1
    wall.advance(5)
    assert store.save("k", '{"v": 2}', machine_version="3") == 2
    assert store.load("k") == StoredSnapshot("k", '{"v": 2}', 2, "3", wall.now)


def test_load_of_an_unknown_key_is_none(store: DjangoSnapshotStore) -> None:
    """An unsaved key loads as None."""
    assert store.load("nope") is None


def test_expected_version_zero_means_create_only(store: DjangoSnapshotStore) -> None:
    """expected_version=0 creates a new key and conflicts when it exists."""
    assert store.save("k", "{}", expected_version=0) == 1
    with pytest.raises(ConflictError, match="expected 0"):
        store.save("k", "{}", expected_version=0)


def test_a_stale_version_conflicts_and_writes_nothing(store: DjangoSnapshotStore) -> None:
    """Saving with an outdated expected_version raises ConflictError and keeps the row."""
    store.save("k", '{"v": 1}')
    store.save("k", '{"v": 2}', expected_version=1)
    with pytest.raises(ConflictError, match="version 2"):
        store.save("k", '{"v": 3}', expected_version=1)
    loaded = store.load("k")
    assert loaded is not None
    assert loaded.snapshot == '{"v": 2}'


def test_delete_and_list_keys(store: DjangoSnapshotStore) -> None:
    """list_keys filters by prefix, sorts and limits; delete reports whether the key existed."""
    for key in ("order:2", "order:1", "user:1"):
        store.save(key, "{}")
    assert store.list_keys(prefix="order:") == ["order:1", "order:2"]
    assert store.list_keys(limit=1) == ["order:1"]
    assert store.delete("order:1") is True
    assert store.delete("order:1") is False


def test_the_lock_is_exclusive(db_alias: str, store: DjangoSnapshotStore) -> None:
    """While one thread holds a key, another times out with LockTimeoutError."""
    from django.db import connections

    held = threading.Event()
    done = threading.Event()
    errors: list[BaseException] = []

    def holder() -> None:
        try:
            with store.lock("k"):
                held.set()
                done.wait(10)
        finally:
            connections[db_alias].close()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)
        try:
            with store.lock("k", timeout=0.2):
                pass
        except LockTimeoutError as exc:
            errors.append(exc)
    finally:
        done.set()
        thread.join(10)
    assert len(errors) == 1
    assert "'k'" in str(errors[0])
    with store.lock("k", timeout=5):
        store.save("k", "{}")
