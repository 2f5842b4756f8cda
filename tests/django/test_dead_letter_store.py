"""What the Django dead-letter store adds to the contract: redaction, search columns, errors."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tests.contract_dead_letters import make_record
from xsm_celery.django.models import DeadLetterRecord
from xsm_celery.django.stores import DjangoDeadLetterStore
from xsm_celery.errors import ConfigurationError, StoreError, StoreUnavailableError


def test_secrets_are_redacted_on_write(sqlite_db: str) -> None:
    """Secret-looking keys in args, snapshot, event and envelope are masked in the table."""
    store = DjangoDeadLetterStore(using=sqlite_db)
    record = make_record(
        task_kwargs={"api_token": "tok_live_1", "amount": 5},
        snapshot={"context": {"password": "hunter2", "order": 7}},
        event={"type": "PAY", "payload": {"cvv": "123"}},
        envelope={"id": "e", "data": {"iban": "DE00"}},
    )
    store.put(record)
    stored = store.get(record.id)
    assert stored is not None
    assert stored.task_kwargs == {"api_token": "***", "amount": 5}
    assert stored.snapshot == {"context": {"password": "***", "order": 7}}
    assert stored.event["payload"] == {"cvv": "***"}
    assert stored.envelope == {"id": "e", "data": {"iban": "***"}}


def test_extra_redact_keys_come_from_settings_and_the_constructor(sqlite_db: str) -> None:
    """XSM_CELERY['REDACT_KEYS'] and redact_keys= both add to the engine's list."""
    store = DjangoDeadLetterStore(using=sqlite_db, redact_keys=["customer"])
    record = make_record(task_kwargs={"customer": "ana", "voucher": "V1", "n": 1})
    with override_settings(XSM_CELERY={"REDACT_KEYS": ["voucher"]}):
        store.put(record)
    stored = store.get(record.id)
    assert stored is not None
    assert stored.task_kwargs == {"customer": "***", "voucher": "***", "n": 1}


def test_derived_columns_feed_search_and_filters(sqlite_db: str) -> None:
    """last_error, error_text, subject and taken_on are filled from the record."""
    store = DjangoDeadLetterStore(using=sqlite_db)
    record = make_record(envelope={"subject": "o-42", "type": "x"}, taken_at=1_700_000_000.0)
    store.put(record)
    row = DeadLetterRecord.objects.using(sqlite_db).get(id=record.id)
    assert row.last_error == "ValueError: bad 7"
    assert row.error_text == "TimeoutError: slow\nValueError: bad 7"
    assert row.subject == "o-42"
    assert row.taken_on.isoformat() == "2023-11-14T22:13:20+00:00"


def test_values_json_cannot_hold_become_strings(sqlite_db: str) -> None:
    """A NaN or an object in a snapshot is stored as its string, as to_json() would."""
    store = DjangoDeadLetterStore(using=sqlite_db)
    record = make_record(snapshot={"ratio": float("nan"), "when": object})
    store.put(record)
    stored = store.get(record.id)
    assert stored is not None
    assert stored.snapshot["ratio"] == "nan"
    assert stored.snapshot["when"] == str(object)


def test_count_counts_open_records_unless_told(sqlite_db: str) -> None:
    """count() leaves resolved records out unless include_resolved is set."""
    store = DjangoDeadLetterStore(using=sqlite_db)
    store.put(make_record())
    store.put(make_record(resolved_at=5.0))
    assert store.count() == 1
    assert store.count(include_resolved=True) == 2


def test_the_alias_comes_from_settings_when_not_given(sqlite_db: str) -> None:
    """With no using=, the store follows XSM_CELERY['DATABASE'], read at call time."""
    store = DjangoDeadLetterStore()
    assert store.using == "default"
    with override_settings(XSM_CELERY={"DATABASE": "postgres"}):
        assert store.using == "postgres"


def test_a_database_error_is_a_store_error(sqlite_db: str) -> None:
    """A missing table surfaces as StoreError naming the operation and the migrate command;
    it is a set-up error (ConfigurationError), not an outage to retry for ever."""
    from django.db import connections

    store = DjangoDeadLetterStore(using=sqlite_db)
    with connections[sqlite_db].cursor() as cursor:
        cursor.execute('ALTER TABLE "xsm_celery_deadletterrecord" RENAME TO "moved_away"')
    try:
        with pytest.raises(StoreError, match=r"get failed.*migrate") as info:
            store.get("x")
        assert isinstance(info.value, ConfigurationError)
        assert not isinstance(info.value, StoreUnavailableError)
    finally:
        with connections[sqlite_db].cursor() as cursor:
            cursor.execute('ALTER TABLE "moved_away" RENAME TO "xsm_celery_deadletterrecord"')
