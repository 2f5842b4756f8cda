"""The stores a Celery app's chart tasks use, opened lazily once per process.

Celery's prefork pool forks after the app is imported, and a database connection must not
cross a fork, so stores are opened on first use in the process that uses them and cached
per (app, process id). A task that never gives up never opens the dead-letter store.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from xsm_celery.celery.django_stores import is_django_url, open_django_store
from xsm_celery.celery.settings import read_settings
from xsm_celery.celery.task.markers import open_attempt_markers
from xsm_celery.errors import ConfigurationError
from xsm_celery.process import current_pid

__all__ = ["AppStores", "stores_for"]


class AppStores:
    """Dead-letter store, timer store and attempt markers of one app in one process."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self.settings = read_settings(app)
        self._lock = threading.Lock()
        self._opened: dict[str, Any] = {}

    def dead_letters(self) -> Any:
        """The configured ``DeadLetterStore`` (``xsm_dead_letter_store``)."""
        return self._once("dead_letters", self._open_dead_letters)

    def timers(self) -> Any:
        """The configured ``TimerStore`` (``xsm_timer_store``)."""
        return self._once("timers", self._open_timers)

    def markers(self) -> Any:
        """Where attempt markers go (``xsm_attempt_markers``)."""
        return self._once("markers", self._open_markers)

    def _once(self, name: str, opener: Any) -> Any:
        found = self._opened.get(name)
        if found is None:
            with self._lock:
                found = self._opened.get(name)
                if found is None:
                    found = self._opened[name] = opener()
        return found

    def _open_dead_letters(self) -> Any:
        value = self.settings.dead_letter_store
        if not isinstance(value, str):
            if not callable(getattr(value, "put", None)):
                raise ConfigurationError(
                    f"xsm_dead_letter_store={value!r} has no put(); give a DeadLetterStore "
                    "or a URL such as sqlite:///dead_letters.db"
                )
            return value
        if is_django_url(value):
            return open_django_store(value, "dead_letters")
        # URLs (memory://, sqlite:///, postgresql://) mean the same store here as in the
        # CLI, so the celery integration resolves them with the sqlalchemy one.
        from xsm_celery.sqlalchemy import open_dead_letter_store

        return open_dead_letter_store(value)

    def _open_timers(self) -> Any:
        value = self.settings.timer_store
        if not isinstance(value, str):
            if not all(hasattr(value, m) for m in ("schedule", "claim", "delete")):
                raise ConfigurationError(
                    f"xsm_timer_store={value!r} is not a TimerStore (schedule/claim/delete); "
                    "give a database URL such as postgresql://user@host/db"
                )
            return value
        if is_django_url(value):
            return open_django_store(value, "timers")
        from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore

        return SQLAlchemyTimerStore(value)

    def _open_markers(self) -> Any:
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
