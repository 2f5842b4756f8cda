"""Every shipped store, lock, plugin and adapter, assigned to the Protocol it claims to implement.

This module is NOT meant to be executed: ``tests/test_typing_contracts.py`` runs mypy on it,
so a store whose method signatures drift from its Protocol fails the suite. Behaviour is
checked by the contract suites (``tests/persistence/store_contract.py``, ``InboxContract``,
``OutboxStoreContract``, ``tests/contract_dead_letters.py``); this checks the shapes.
"""

from __future__ import annotations

from xsm_celery.celery.task.markers import (
    AttemptMarkers,
    BackendAttemptMarkers,
    MemoryAttemptMarkers,
)
from xsm_celery.django.stores import (
    DjangoDeadLetterStore,
    DjangoInbox,
    DjangoOutboxStore,
    DjangoSnapshotStore,
    DjangoTimerStore,
)
from xsm_celery.eda.broker import BrokerAdapter, SyncBrokerAdapter
from xsm_celery.eda.fake import FakeBrokerAdapter, SyncFakeBrokerAdapter
from xsm_celery.eda.outbox_protocols import OutboxStore
from xsm_celery.eda.outbox_store import MemoryOutboxStore, SQLiteOutboxStore
from xsm_celery.engine import LoggingInspector, Plugin, PluginBase
from xsm_celery.patterns.dead_letter import DeadLetterStore, DeadLetterStoreProtocol
from xsm_celery.persistence import (
    IdempotencyPlugin,
    Inbox,
    LockStrategy,
    MemoryInbox,
    MemoryStore,
    MemoryTimerStore,
    OptimisticLock,
    PessimisticLock,
    SQLiteInbox,
    SQLiteStore,
    StateStore,
    TimerStore,
)
from xsm_celery.redis import RedisInbox
from xsm_celery.redis.markers import RedisAttemptMarkers
from xsm_celery.sqlalchemy import (
    SQLAlchemyAttemptMarkers,
    SQLAlchemyDeadLetterStore,
    SQLAlchemyInbox,
    SQLAlchemyOutboxStore,
    SQLAlchemyStore,
    SQLAlchemyTimerStore,
)


def state_stores(
    a: MemoryStore, b: SQLiteStore, c: SQLAlchemyStore, d: DjangoSnapshotStore
) -> None:
    """Snapshot stores."""
    stores: list[StateStore] = [a, b, c, d]
    del stores


def inboxes(
    a: MemoryInbox, b: SQLiteInbox, c: SQLAlchemyInbox, d: RedisInbox, e: DjangoInbox
) -> None:
    """Inboxes."""
    found: list[Inbox] = [a, b, c, d, e]
    del found


def outboxes(
    a: MemoryOutboxStore, b: SQLiteOutboxStore, c: SQLAlchemyOutboxStore, d: DjangoOutboxStore
) -> None:
    """Outbox stores."""
    found: list[OutboxStore] = [a, b, c, d]
    del found


def timer_stores(a: MemoryTimerStore, b: SQLAlchemyTimerStore, c: DjangoTimerStore) -> None:
    """Durable timer indexes."""
    found: list[TimerStore] = [a, b, c]
    del found


def dead_letter_stores(
    a: DeadLetterStore, b: SQLAlchemyDeadLetterStore, c: DjangoDeadLetterStore
) -> None:
    """Dead-letter stores."""
    found: list[DeadLetterStoreProtocol] = [a, b, c]
    del found


def markers(
    a: MemoryAttemptMarkers,
    b: BackendAttemptMarkers,
    c: RedisAttemptMarkers,
    d: SQLAlchemyAttemptMarkers,
) -> None:
    """Attempt markers."""
    found: list[AttemptMarkers] = [a, b, c, d]
    del found


def locks(a: OptimisticLock, b: PessimisticLock) -> None:
    """Lock strategies of ``persisted()``."""
    found: list[LockStrategy] = [a, b]
    del found


def plugins(a: PluginBase, b: LoggingInspector, c: IdempotencyPlugin) -> None:
    """Interpreter plugins."""
    found: list[Plugin] = [a, b, c]
    del found


def brokers(a: SyncFakeBrokerAdapter, b: FakeBrokerAdapter) -> None:
    """The in-memory brokers speak the blocking and the asyncio adapter contracts."""
    sync: SyncBrokerAdapter = a
    aio: BrokerAdapter = b
    del sync, aio
