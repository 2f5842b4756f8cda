"""Where machine instances live between deliveries: stores, locks, inbox, durable timers, and
the seam that opens a store from a setting (``opening``).

Standard library only. The protocols in ``xsm_celery.persistence.protocols`` are what the
SQLAlchemy, Django and Redis integrations implement.
"""

from __future__ import annotations

from xsm_celery.errors import ConflictError, StoreError
from xsm_celery.persistence.family import WorkflowStores
from xsm_celery.persistence.idempotency import (
    Admission,
    AdmissionKind,
    IdempotencyPlugin,
)
from xsm_celery.persistence.inbox import MemoryInbox, SQLiteInbox, fingerprint
from xsm_celery.persistence.locks import OptimisticLock, PessimisticLock
from xsm_celery.persistence.markers import AttemptMarkers, MemoryAttemptMarkers
from xsm_celery.persistence.memory import MemoryStore
from xsm_celery.persistence.opening import StoreRequest, open_store, register_scheme
from xsm_celery.persistence.persisted import is_persisted, persisted
from xsm_celery.persistence.protocols import (
    DEFAULT_CLAIM_LEASE_S,
    DueTimer,
    Inbox,
    InboxEntry,
    LockStrategy,
    StateStore,
    StoredSnapshot,
    TimerStore,
)
from xsm_celery.persistence.sqlite import SQLiteDatabase, SQLiteStore
from xsm_celery.persistence.timers import (
    DueTimerScanner,
    DurableTimers,
    MemoryTimerStore,
    ScanResult,
    deadlines_of,
)

__all__ = [
    # Stores
    "MemoryInbox",
    "MemoryStore",
    "SQLiteDatabase",
    "SQLiteInbox",
    "SQLiteStore",
    "fingerprint",
    # Instances
    "OptimisticLock",
    "PessimisticLock",
    "is_persisted",
    "persisted",
    # Durable timers
    "DueTimerScanner",
    "DurableTimers",
    "MemoryTimerStore",
    "ScanResult",
    "deadlines_of",
    # Opening stores from settings (URLs or objects)
    "StoreRequest",
    "WorkflowStores",
    "open_store",
    "register_scheme",
    # Attempt markers
    "AttemptMarkers",
    "MemoryAttemptMarkers",
    # Deduplication
    "Admission",
    "AdmissionKind",
    "IdempotencyPlugin",
    # Protocols and records
    "DEFAULT_CLAIM_LEASE_S",
    "DueTimer",
    "Inbox",
    "InboxEntry",
    "LockStrategy",
    "StateStore",
    "StoredSnapshot",
    "TimerStore",
    # Errors
    "ConflictError",
    "StoreError",
]
