"""The shared dead-letter store contract, run on every store this repository ships."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.contract_dead_letters import DeadLetterStoreContract
from xsm_celery.django.stores import DjangoDeadLetterStore
from xsm_celery.patterns.dead_letter import MemoryDeadLetterStore


class TestMemoryStore(DeadLetterStoreContract):
    """The reference in-memory store."""

    @pytest.fixture
    def store(self) -> Any:
        """A fresh in-memory store."""
        return MemoryDeadLetterStore()


class TestDjangoStore(DeadLetterStoreContract):
    """The Django store, once on SQLite and once on PostgreSQL."""

    @pytest.fixture
    def store(self, db_alias: str) -> Any:
        """A Django store on an empty database."""
        return DjangoDeadLetterStore(using=db_alias)


class TestSQLAlchemyStore(DeadLetterStoreContract):
    """The SQLAlchemy store on a SQLite file, when that package is present."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Any:
        """A SQLAlchemy store on a fresh SQLite file."""
        sqlalchemy_store = pytest.importorskip("xsm_celery.sqlalchemy")
        return sqlalchemy_store.SQLAlchemyDeadLetterStore(f"sqlite:///{tmp_path / 'dlq.db'}")
