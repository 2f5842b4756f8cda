"""Bad input is not an outage: a value a store refuses is counted and dead-lettered at once.

Only ``StoreUnavailableError`` (and a lock timeout or an optimistic conflict) is requeued
without counting; each backend maps its driver's connection errors to it, and its refusals
(a value too long for a column, a snapshot over the cap) to plain ``StoreError``.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from tests.eda.charts import counter
from xsm_celery import MachineLogic, create_machine
from xsm_celery.eda import (
    Envelope,
    InboundDispatcher,
    MemoryDeadLetterStore,
    SyncFakeBrokerAdapter,
)
from xsm_celery.errors import EnvelopeCorruptError, StoreError, StoreUnavailableError
from xsm_celery.persistence import MemoryInbox, MemoryStore
from xsm_celery.persistence.memory import MAX_KEY_LENGTH
from xsm_celery.sqlalchemy import SQLAlchemyInbox, SQLAlchemyStore
from xsm_celery.sqlalchemy.connect import make_engine


def _grow(i: Any, ctx: dict[str, Any], e: Any, a: Any) -> None:
    ctx["blob"] = e.payload.get("blob", "")


def _growing() -> Any:
    """``grow``: GROW copies the payload's blob into the context."""
    return create_machine(
        {
            "id": "grow",
            "initial": "on",
            "context": {},
            "states": {"on": {"on": {"GROW": {"actions": "grow"}}}},
        },
        logic=MachineLogic(actions={"grow": _grow}),
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema, dropped afterwards."""
    schema = f"xsm_i9_{uuid.uuid4().hex[:12]}"
    admin = make_engine(postgres_url)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = make_engine(postgres_url).url.update_query_dict({"options": f"-csearch_path={schema}"})
    yield url.render_as_string(hide_password=False)
    with admin.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


def _raw(**changes: Any) -> dict[str, Any]:
    raw = {
        "specversion": "1.0",
        "id": "e-1",
        "type": "xsm.counter.INC",
        "source": "shop",
        "subject": "c-1",
        "data": {"n": 1},
    }
    raw.update(changes)
    return raw


@pytest.mark.parametrize("name", ["id", "type", "source", "subject"])
def test_an_attribute_no_store_can_key_is_refused_by_the_envelope(name: str) -> None:
    """An id, type, source or subject longer than the stores' key limit is corrupt."""
    Envelope.from_dict(_raw(**{name: "k" * MAX_KEY_LENGTH}))
    with pytest.raises(EnvelopeCorruptError, match=f"'{name}' exceeds {MAX_KEY_LENGTH}"):
        Envelope.from_dict(_raw(**{name: "k" * (MAX_KEY_LENGTH + 1)}))


def test_duplicate_json_keys_are_corrupt() -> None:
    """An envelope repeating a key is refused, so two parsers cannot disagree on its id."""
    text = json.dumps(_raw())[:-1] + ', "id": "e-2"}'
    with pytest.raises(EnvelopeCorruptError, match="repeats the key 'id'"):
        Envelope.from_json(text)
    nested = json.dumps(_raw()).replace('{"n": 1}', '{"n": 1, "n": 2}')
    with pytest.raises(EnvelopeCorruptError, match="repeats the key 'n'"):
        Envelope.from_json(nested)


def test_duplicate_keys_are_dead_lettered_as_corrupt_on_the_first_delivery() -> None:
    """The dispatcher dead-letters a duplicate-key envelope at once, reason ``corrupt``."""
    dlq = MemoryDeadLetterStore()
    dispatcher = InboundDispatcher(MemoryStore(), {"xsm.counter.INC": counter()}, dead_letters=dlq)
    result = dispatcher.handle(json.dumps(_raw())[:-1] + ', "subject": "c-2"}')
    assert result.dead_lettered == 1
    assert [r.reason for r in dlq.all()] == ["corrupt"]
    assert "repeats the key 'subject'" in dlq.all()[0].errors[0]["message"]


def test_a_context_over_the_snapshot_cap_is_dead_lettered_not_requeued() -> None:
    """A step whose snapshot the store refuses is counted and dead-lettered on delivery one."""
    dlq = MemoryDeadLetterStore()
    dispatcher = InboundDispatcher(
        MemoryStore(max_bytes=2048), {"xsm.grow.GROW": _growing()}, dead_letters=dlq, max_attempts=5
    )
    broker = SyncFakeBrokerAdapter()
    broker.deliver(
        "in", Envelope.new(type="xsm.grow.GROW", subject="g-1", data={"blob": "x" * 4096})
    )
    broker.deliver("in", Envelope.new(type="xsm.grow.GROW", subject="g-1", data={"blob": "ok"}))
    result = dispatcher.run_once_sync(broker, "in")
    assert result.dead_lettered == 1
    assert result.processed == 1
    (record,) = dlq.all()
    assert record.reason == "store_refused"
    assert record.attempts == 1
    assert "over the 2048-byte cap" in record.errors[0]["message"]
    assert broker.pending("in") == 0


def test_an_outage_is_still_requeued_without_counting() -> None:
    """``StoreUnavailableError`` keeps its meaning: requeued, never dead-lettered."""

    class Down(MemoryStore):
        def load(self, key: str) -> Any:
            raise StoreUnavailableError("down")

    dlq = MemoryDeadLetterStore()
    dispatcher = InboundDispatcher(
        Down(), {"xsm.counter.INC": counter()}, dead_letters=dlq, max_attempts=1
    )
    broker = SyncFakeBrokerAdapter()
    broker.deliver("in", Envelope.new(type="xsm.counter.INC", subject="c-1"))
    for _ in range(3):
        assert dispatcher.run_once_sync(broker, "in").retried == 1
    assert dlq.all() == []
    assert broker.pending("in") == 1


@pytest.mark.service
def test_postgres_keeps_every_key_the_envelope_accepts(pg_url: str) -> None:
    """On PostgreSQL, the longest id, source and subject an envelope accepts are processed."""
    store = SQLAlchemyStore(pg_url)
    inbox = SQLAlchemyInbox(store)
    dlq = MemoryDeadLetterStore()
    dispatcher = InboundDispatcher(
        store, {"xsm.counter.INC": counter()}, inbox=inbox, dead_letters=dlq
    )
    longest = MAX_KEY_LENGTH
    env = Envelope.new(
        type="xsm.counter.INC",
        subject="s" * longest,
        source="q" * longest,
        id="i" * longest,
        data={"n": 1},
    )
    assert dispatcher.handle(env).processed == 1, dlq.all()
    assert dispatcher.handle(env).duplicates == 1
    assert store.load("s" * longest) is not None


@pytest.mark.service
def test_postgres_refusal_is_a_store_error_not_an_outage(pg_url: str) -> None:
    """A value PostgreSQL refuses (too long for its column) is ``StoreError``, not unavailable."""
    store = SQLAlchemyStore(pg_url)
    inbox = SQLAlchemyInbox(store)
    with pytest.raises(StoreError) as caught:
        inbox.claim("scope", "k" * 300, "fp", ttl_s=None)
    assert not isinstance(caught.value, StoreUnavailableError)


@pytest.mark.service
def test_postgres_that_is_down_is_unavailable() -> None:
    """A PostgreSQL server that refuses connections raises ``StoreUnavailableError``."""
    url = f"postgresql://postgres@127.0.0.1:{_free_port()}/test?connect_timeout=2"
    with pytest.raises(StoreUnavailableError):
        SQLAlchemyStore(url).load("k")


def test_sqlite_refusal_and_outage_are_told_apart(tmp_path: Any) -> None:
    """The stdlib SQLite store: a missing folder is an outage, a bad statement a refusal."""
    import sqlite3

    from xsm_celery.persistence.sqlite import sqlite_error

    down = sqlite_error("read", "x.db", sqlite3.OperationalError("unable to open database file"))
    refused = sqlite_error("write", "x.db", sqlite3.IntegrityError("NOT NULL constraint failed"))
    assert isinstance(down, StoreUnavailableError)
    assert type(refused) is StoreError


@pytest.mark.service
def test_redis_refusal_and_outage_are_told_apart(redis_url: str) -> None:
    """Redis down is ``StoreUnavailableError``; a command Redis refuses is plain ``StoreError``."""
    import redis

    from xsm_celery.redis import RedisInbox

    down = RedisInbox(
        redis.Redis.from_url(f"redis://127.0.0.1:{_free_port()}/0", socket_connect_timeout=1)
    )
    with pytest.raises(StoreUnavailableError):
        down.get("scope", "key")
    client = redis.Redis.from_url(redis_url)
    refused = RedisInbox(client, prefix=f"xsm-i9:{uuid.uuid4().hex}:")
    client.lpush(refused._key("scope", "key"), "not an inbox entry")
    with pytest.raises(StoreError, match="WRONGTYPE") as caught:
        refused.get("scope", "key")
    assert not isinstance(caught.value, StoreUnavailableError)
    client.close()


def test_memory_inbox_dispatch_of_a_long_scope_fits() -> None:
    """A source and subject at the key limit give a scope no longer than an inbox column."""
    from xsm_celery.persistence.idempotency import MAX_SCOPE_LENGTH, IdempotencyPlugin

    scope = IdempotencyPlugin(MemoryInbox()).scope_for("q" * MAX_KEY_LENGTH, "s" * MAX_KEY_LENGTH)
    assert len(scope) <= MAX_SCOPE_LENGTH
    assert scope != IdempotencyPlugin.scope_for("q" * MAX_KEY_LENGTH, "t" * MAX_KEY_LENGTH)
