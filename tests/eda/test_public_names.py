"""Every name the specification imports from eda, persistence and contrib exists, with its value."""

from __future__ import annotations

import importlib

import pytest

NAMES = {
    "xsm_celery.eda": [
        "Envelope",
        "EnvelopeCorruptError",
        "EnvelopeTooLargeError",
        "BrokerAdapter",
        "SyncBrokerAdapter",
        "Delivery",
        "FakeBrokerAdapter",
        "SyncFakeBrokerAdapter",
        "BrokerPublishError",
        "InboundDispatcher",
        "DispatchResult",
        "OutboxPlugin",
        "OutboxStore",
        "OutboxRecord",
        "OutboxRelay",
        "MemoryOutboxStore",
        "SQLiteOutboxStore",
        "DeadLetter",
        "DeadLetterPlugin",
        "DeadLetterStore",
        "MemoryDeadLetterStore",
        "SQLiteDeadLetterStore",
        "BrokerDeadLetterSink",
        "ReplayResult",
        "ReplayRefusedError",
        "replay_dead_letter",
        "redact_record",
        "consumed_events",
        "publish_specs",
        "default_event_name",
        "dlq_topic",
        "new_id",
    ],
    "xsm_celery.persistence": [
        "MemoryStore",
        "MemoryInbox",
        "SQLiteInbox",
        "OptimisticLock",
        "PessimisticLock",
        "IdempotencyPlugin",
        "StoredSnapshot",
        "StoreError",
        "persisted",
        "DueTimerScanner",
        "ConflictError",
    ],
    "xsm_celery.contrib.cloudevents": [
        "to_cloudevent",
        "from_cloudevent",
        "to_binary",
        "to_structured",
        "from_http",
    ],
    "xsm_celery.contrib.testing": ["FakeBrokerAdapter", "replay", "assert_replay_consistent"],
}

VALUES = {
    "DEFAULT_CLAIM_LEASE_S": 30.0,
    "PUBLISH_TAG": "publish",
    "ATTEMPT_EXTENSION": "xsmattempt",
    "DEFAULT_MAX_ATTEMPTS": 5,
    "DEFAULT_MAX_IN_FLIGHT": 16,
    "SPECVERSION": "1.0",
    "MAX_DATA_DEPTH": 64,
}


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, names in NAMES.items() for n in names])
def test_name_imports(module: str, name: str) -> None:
    """The name imports from the module the specification uses, and is public."""
    loaded = importlib.import_module(module)
    assert hasattr(loaded, name)
    assert name in loaded.__all__


@pytest.mark.parametrize(("name", "value"), sorted(VALUES.items()))
def test_constant_values(name: str, value: object) -> None:
    """The eda constants have the specification's literal values."""
    from xsm_celery import eda

    assert getattr(eda, name) == value
    assert name in eda.__all__


def test_errors_are_the_shared_ones() -> None:
    """eda and persistence re-export the classes of xsm_celery.errors, not copies."""
    from xsm_celery import eda, errors, persistence

    assert eda.EnvelopeCorruptError is errors.EnvelopeCorruptError
    assert eda.ReplayRefusedError is errors.ReplayRefusedError
    assert persistence.StoreError is errors.StoreError


def test_all_lists_only_existing_names() -> None:
    """Every __all__ entry of the packages exists."""
    for module in NAMES:
        loaded = importlib.import_module(module)
        missing = [n for n in loaded.__all__ if not hasattr(loaded, n)]
        assert missing == [], module
