"""The shared outbox, snapshot-store and inbox contracts, run on the Django stores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.eda.outbox_contract import FakeClock, OutboxStoreContract
from tests.persistence.store_contract import StateStoreContract
from tests.persistence.test_inbox import InboxContract
from xsm_celery.django.stores import DjangoInbox, DjangoOutboxStore, DjangoSnapshotStore


class TestDjangoOutboxContract(OutboxStoreContract):
    """DjangoOutboxStore on SQLite and PostgreSQL."""

    @pytest.fixture
    def outbox_factory(self, db_alias: str) -> Callable[[FakeClock], Any]:
        """Stores on an empty database, driven by the contract's clock."""
        return lambda clock: DjangoOutboxStore(using=db_alias, wall=clock)


class TestDjangoStateStoreContract(StateStoreContract):
    """DjangoSnapshotStore on SQLite and PostgreSQL."""

    @pytest.fixture
    def store(self, db_alias: str) -> DjangoSnapshotStore:
        """A snapshot store on an empty database."""
        return DjangoSnapshotStore(using=db_alias)


class TestDjangoInboxContract(InboxContract):
    """DjangoInbox on SQLite and PostgreSQL."""

    @pytest.fixture
    def inbox(self, db_alias: str) -> DjangoInbox:
        """An inbox on an empty database."""
        return DjangoInbox(using=db_alias)
