"""Where the consumer step's envelope dead letters go: the app's dead-letter store.

An ``InboundDispatcher`` built without ``dead_letters=`` keeps them in process memory,
which no admin page, CLI or other worker can read, and which a restart empties. Inside a
Celery worker the step therefore hands such a dispatcher the app's
``xsm_dead_letter_store``, and refuses a memory store (given or configured) unless the
step was installed with ``allow_memory_dead_letters=True``.
"""

from __future__ import annotations

from typing import Any

from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns.dead_letter import DeadLetterStore

__all__ = ["adopt_app_dead_letters", "is_memory_store"]


def is_memory_store(store: Any) -> bool:
    """Whether ``store`` keeps its records in this process only."""
    return isinstance(store, DeadLetterStore)


def adopt_app_dead_letters(dispatcher: Any, app: Any, *, allow_memory: bool) -> Any:
    """Give ``dispatcher`` the app's store if it has only the default; return the store.

    Raises:
        ConfigurationError: the store the dispatcher would use lives in process memory and
            ``allow_memory`` is false.
    """
    if getattr(dispatcher, "dead_letters_defaulted", False):
        from xsm_celery.celery.stores import stores_for

        dispatcher.dead_letters = stores_for(app).dead_letters()
        dispatcher.dead_letters_defaulted = False
    store = dispatcher.dead_letters
    if is_memory_store(store) and not allow_memory:
        raise ConfigurationError(
            "the consumer step's dead letters would stay in this worker's memory, where "
            "neither the admin nor the CLI can read them and a restart loses them; set "
            "xsm_dead_letter_store to a database URL (or 'django'), or pass "
            "install_dispatcher(..., allow_memory_dead_letters=True) for a test"
        )
    return store
