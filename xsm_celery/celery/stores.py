"""The stores a Celery app's chart tasks use, opened lazily once per process.

Celery's prefork pool forks after the app is imported, and a database connection must not
cross a fork, so stores are opened on first use in the process that uses them and cached
per (app, process id). A task that never gives up never opens the dead-letter store. What a
setting names is turned into a store by ``xsm_celery.persistence.opening``, the one seam
that also serves workflows, the relay and the CLI.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

from xsm_celery.celery.settings import read_settings
from xsm_celery.celery.task.markers import open_attempt_markers
from xsm_celery.eda.opening import open_dead_letters
from xsm_celery.patterns.dead_letter import DeadLetterStoreProtocol
from xsm_celery.persistence.markers import AttemptMarkers
from xsm_celery.persistence.opening import open_store
from xsm_celery.persistence.protocols import TimerStore
from xsm_celery.process import current_pid

__all__ = ["AppStores", "stores_for"]

_T = TypeVar("_T")


class AppStores:
    """Dead-letter store, timer store and attempt markers of one app in one process."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self.settings = read_settings(app)
        self._lock = threading.Lock()
        self._opened: dict[str, Any] = {}

    def dead_letters(self) -> DeadLetterStoreProtocol:
        """The configured ``DeadLetterStore`` (``xsm_dead_letter_store``)."""
        return self._once("dead_letters", self._open_dead_letters)

    def timers(self) -> TimerStore:
        """The configured ``TimerStore`` (``xsm_timer_store``)."""
        return self._once("timers", self._open_timers)

    def markers(self) -> AttemptMarkers:
        """Where attempt markers go (``xsm_attempt_markers``)."""
        return self._once("markers", self._open_markers)

    def _once(self, name: str, opener: Callable[[], _T]) -> _T:
        found = self._opened.get(name)
        if found is None:
            with self._lock:
                found = self._opened.get(name)
                if found is None:
                    found = self._opened[name] = opener()
        return cast(_T, found)

    def _open_dead_letters(self) -> DeadLetterStoreProtocol:
        value = self.settings.dead_letter_store
        return open_dead_letters(value, setting="xsm_dead_letter_store")

    def _open_timers(self) -> TimerStore:
        return open_store(self.settings.timer_store, "timers", setting="xsm_timer_store")

    def _open_markers(self) -> AttemptMarkers:
        s = self.settings
        return open_attempt_markers(self._app, s.attempt_markers, s.timer_store, s.marker_ttl_s)


_cache: weakref.WeakKeyDictionary[Any, tuple[int, AppStores]] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def stores_for(app: Any) -> AppStores:
    """The ``AppStores`` of ``app`` in this process (a fresh one after a fork).

    Every attempt asks for its markers here, so the process id is ``current_pid()``, kept
    without a system call (see ``xsm_celery.process``).
    """
    pid = current_pid()
    found = _cache.get(app)
    if found is not None and found[0] == pid:
        return found[1]
    with _cache_lock:
        found = _cache.get(app)
        if found is None or found[0] != pid:
            found = (pid, AppStores(app))
            _cache[app] = found
    return found[1]
