"""Lock strategies: how concurrent writers of one instance are kept from losing updates.

``OptimisticLock`` loads without locking and saves only over the version it loaded; the
loser of a race gets ``ConflictError`` and ``run`` retries it from a fresh load (its
actions ran once more: at-least-once). ``PessimisticLock`` holds the store's lock for the
whole load-act-save, which on SQL stores is one transaction: outbox rows written in it
roll back with the snapshot.

A strategy's ``run`` drives ``persisted()``, so this module imports that one; ``persisted()``
given no lock behaves as ``OptimisticLock`` without needing the class.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from xsm_celery.errors import ConfigurationError, ConflictError
from xsm_celery.persistence.persisted import persisted

if TYPE_CHECKING:
    from xsm_celery.engine import Machine
    from xsm_celery.persistence.protocols import StateStore

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_S",
    "DEFAULT_OPTIMISTIC_RETRIES",
    "OptimisticLock",
    "PessimisticLock",
]

#: Times ``OptimisticLock.run`` re-runs a block that lost a save race.
DEFAULT_OPTIMISTIC_RETRIES = 3
#: Seconds ``PessimisticLock`` waits for the store's lock.
DEFAULT_LOCK_TIMEOUT_S = 10.0

T = TypeVar("T")


class OptimisticLock:
    """Save only over the loaded version; retry the whole block when another writer won.

    Args:
        retries: Extra attempts ``run`` makes after a ``ConflictError``.
    """

    def __init__(self, retries: int = DEFAULT_OPTIMISTIC_RETRIES) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigurationError(f"retries must be an int >= 0, got {retries!r}")
        self.retries = retries

    def acquire(self, store: StateStore, key: str) -> contextlib.AbstractContextManager[Any]:
        """Nothing to hold: the version check at save time is the lock."""
        return contextlib.nullcontext()

    def expected(self, loaded_version: int) -> int | None:
        """The version the save must find: the one that was loaded."""
        return loaded_version

    def run(
        self, store: StateStore, key: str, machine: Machine, fn: Callable[[Any], T], **options: Any
    ) -> T:
        """Run ``fn(interpreter)`` in ``persisted()``, re-running it after a lost race."""
        for attempt in range(self.retries + 1):
            try:
                with persisted(store, key, machine, lock=self, **options) as interp:
                    result = fn(interp)
                return result
            except ConflictError:
                if attempt == self.retries:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def __repr__(self) -> str:
        return f"OptimisticLock(retries={self.retries})"


class PessimisticLock:
    """Hold the store's lock (its transaction, on SQL stores) for load, act and save.

    Args:
        timeout: Seconds to wait for the lock before ``LockTimeoutError``.
    """

    def __init__(self, timeout: float = DEFAULT_LOCK_TIMEOUT_S) -> None:
        if not timeout >= 0:
            raise ConfigurationError(f"timeout must be >= 0 seconds, got {timeout!r}")
        self.timeout = float(timeout)

    def acquire(self, store: StateStore, key: str) -> contextlib.AbstractContextManager[Any]:
        """Return the store's lock on ``key``."""
        lock: contextlib.AbstractContextManager[Any] = store.lock(key, timeout=self.timeout)
        return lock

    def expected(self, loaded_version: int) -> int | None:
        """Still checked: a writer that bypassed the lock is caught, never overwritten."""
        return loaded_version

    def run(
        self, store: StateStore, key: str, machine: Machine, fn: Callable[[Any], T], **options: Any
    ) -> T:
        """Run ``fn(interpreter)`` once in ``persisted()`` under the lock."""
        with persisted(store, key, machine, lock=self, **options) as interp:
            result = fn(interp)
        return result

    def __repr__(self) -> str:
        return f"PessimisticLock(timeout={self.timeout})"
