"""The snapshot store contract, as a reusable test class every StateStore runs.

Subclass it and provide a ``store`` fixture returning a fresh, empty store.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from xsm_celery.errors import ConflictError, LockTimeoutError, StoreError

__all__ = ["StateStoreContract"]


class StateStoreContract:
    """What every snapshot store does: versions, conflicts, keys, listing, locks."""

    def test_missing_key_loads_none(self, store: Any) -> None:
        """An unknown key loads as None."""
        assert store.load("nope") is None

    def test_save_then_load(self, store: Any) -> None:
        """A saved snapshot loads back with version 1 and its machine version."""
        assert store.save("k", '{"a":1}', machine_version="3") == 1
        record = store.load("k")
        assert record.snapshot == '{"a":1}'
        assert record.version == 1
        assert record.machine_version == "3"
        assert record.key == "k"
        assert record.updated_at > 0

    def test_versions_grow_per_save(self, store: Any) -> None:
        """Every save bumps the version by one."""
        assert [store.save("k", "{}") for _ in range(3)] == [1, 2, 3]

    def test_expected_version_conflict(self, store: Any) -> None:
        """A save over a stale version raises ConflictError and writes nothing."""
        store.save("k", '"one"')
        with pytest.raises(ConflictError, match="expected 0"):
            store.save("k", '"two"', expected_version=0)
        assert store.load("k").snapshot == '"one"'
        assert store.save("k", '"two"', expected_version=1) == 2

    def test_expected_zero_means_new(self, store: Any) -> None:
        """expected_version=0 creates a key that does not exist yet."""
        assert store.save("k", "{}", expected_version=0) == 1

    def test_delete(self, store: Any) -> None:
        """delete() removes a key and tells whether it existed."""
        store.save("k", "{}")
        assert store.delete("k") is True
        assert store.delete("k") is False
        assert store.load("k") is None

    def test_list_keys_by_prefix(self, store: Any) -> None:
        """list_keys filters by prefix, sorts, and honours the limit."""
        for key in ("b:2", "a:1", "b:1", "b_x"):
            store.save(key, "{}")
        assert store.list_keys(prefix="b:") == ["b:1", "b:2"]
        assert store.list_keys(limit=2) == ["a:1", "b:1"]

    @pytest.mark.parametrize("key", ["", "x" * 201, "a\x00b", 5])
    def test_bad_keys_are_refused(self, store: Any, key: object) -> None:
        """Empty, overlong, NUL-bearing and non-string keys are refused."""
        with pytest.raises(StoreError):
            store.save(key, "{}")

    def test_oversized_snapshot_is_refused(self, store: Any) -> None:
        """A snapshot over the byte cap is refused."""
        store.max_bytes = 100
        with pytest.raises(StoreError, match="cap"):
            store.save("k", "x" * 101)

    def test_lock_times_out(self, store: Any) -> None:
        """A lock held by another thread raises LockTimeoutError after the timeout."""
        held, done = threading.Event(), threading.Event()

        def holder() -> None:
            with store.lock("k"):
                held.set()
                done.wait(5)

        thread = threading.Thread(target=holder)
        thread.start()
        held.wait(5)
        try:
            with pytest.raises(LockTimeoutError), store.lock("k", timeout=0.05):
                pass
        finally:
            done.set()
            thread.join()
