""" "django" and "django://<alias>" open the Django app's store of every kind but markers."""

from __future__ import annotations

from typing import Any

import pytest

from xsm_celery.django.stores import (
    DjangoDeadLetterStore,
    DjangoInbox,
    DjangoOutboxStore,
    DjangoSnapshotStore,
    DjangoTimerStore,
)
from xsm_celery.django.stores.workflows import DjangoWorkflowJournal
from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.opening import open_store

CLASSES: dict[Any, type] = {
    "snapshots": DjangoSnapshotStore,
    "inbox": DjangoInbox,
    "outbox": DjangoOutboxStore,
    "timers": DjangoTimerStore,
    "dead_letters": DjangoDeadLetterStore,
}


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_django_opens_each_kind_on_the_default_alias(sqlite_db: str, kind: Any) -> None:
    """Bare "django" is the app's class on XSM_CELERY["DATABASE"]."""
    store = open_store("django", kind, setting="xsm_test_store")
    assert isinstance(store, CLASSES[kind])
    assert store._using is None  # type: ignore[attr-defined]
    assert store.using == sqlite_db  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_an_alias_after_the_scheme_picks_the_database(db_alias: str, kind: Any) -> None:
    """django://<alias> opens the store on that alias, SQLite and PostgreSQL alike."""
    store = open_store(f"django://{db_alias}", kind)
    assert isinstance(store, CLASSES[kind])
    assert store.using == db_alias  # type: ignore[attr-defined]


def test_the_opened_stores_work(db_alias: str) -> None:
    """A snapshot saved through the opened store is loaded back."""
    snapshots = open_store(f"django://{db_alias}", "snapshots")
    assert snapshots.save("opening:k", "{}") == 1
    loaded = snapshots.load("opening:k")
    assert loaded is not None
    assert loaded.version == 1


def test_a_workflow_family_lives_on_one_alias(db_alias: str) -> None:
    """The workflow kind is the snapshot store and its siblings on the same alias."""
    family = open_store(f"django://{db_alias}", "workflow")
    assert isinstance(family.snapshots, DjangoSnapshotStore)
    assert isinstance(family.inbox, DjangoInbox)
    assert isinstance(family.timers, DjangoTimerStore)
    assert isinstance(family.outbox, DjangoOutboxStore)
    assert isinstance(family.journal, DjangoWorkflowJournal)
    stores = (family.snapshots, family.inbox, family.timers, family.outbox, family.journal)
    assert {s.using for s in stores} == {db_alias}
    assert family.description == f"django://{db_alias}"


def test_a_django_store_object_builds_its_family(sqlite_db: str) -> None:
    """A DjangoSnapshotStore given as a workflow's store is asked for its own family."""
    store = DjangoSnapshotStore(using=sqlite_db)
    family = open_store(store, "workflow")
    assert family.snapshots is store
    assert family.outbox is not None
    assert family.outbox.using == sqlite_db  # type: ignore[attr-defined]


def test_markers_are_not_kept_in_django(sqlite_db: str) -> None:
    """The Django app has no markers table; the refusal lists where markers may go."""
    with pytest.raises(
        ConfigurationError, match="use redis://, rediss://, unix://, sentinel://, memory://"
    ):
        open_store("django", "markers", setting="xsm_attempt_markers")
