"""The outbox and dead-letter kinds of the store seam: typed openers, memory:// dead letters."""

from __future__ import annotations

import pytest

from xsm_celery.eda import MemoryOutboxStore
from xsm_celery.eda.opening import open_dead_letters, open_outbox, reset_memory_stores
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns.dead_letter import MemoryDeadLetterStore


def test_memory_dead_letter_stores_are_shared_by_name() -> None:
    """A worker's tasks and the test inspecting them see one store per memory:// name."""
    reset_memory_stores()
    jobs = open_dead_letters("memory://jobs", setting="xsm_dead_letter_store")
    assert isinstance(jobs, MemoryDeadLetterStore)
    assert open_dead_letters("memory://jobs") is jobs
    assert open_dead_letters("memory://other") is not jobs
    reset_memory_stores()
    assert open_dead_letters("memory://jobs") is not jobs


def test_store_objects_are_checked_and_returned() -> None:
    """An outbox or dead-letter store object is used as it is; a non-store is refused."""
    outbox = MemoryOutboxStore()
    assert open_outbox(outbox, setting="xsm_outbox_store") is outbox
    dead_letters = MemoryDeadLetterStore()
    assert open_dead_letters(dead_letters) is dead_letters
    with pytest.raises(ConfigurationError, match=r"is not an outbox store: it has no add\(\)"):
        open_outbox(42, setting="xsm_outbox_store")


def test_the_outbox_is_never_in_memory_by_url() -> None:
    """An outbox shares its snapshot store's transaction, so memory:// names none."""
    with pytest.raises(ConfigurationError, match="unsupported outbox store URL 'memory://'"):
        open_outbox("memory://", setting="xsm_outbox_store")
