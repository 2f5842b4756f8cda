"""Fixtures' helpers for the workflow tests: a private PostgreSQL schema, fact capture."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import sqlalchemy as sa

from xsm_celery.hooks import Fact, subscribe


@contextmanager
def private_schema(postgres_url: str) -> Iterator[str]:
    """A URL whose connections use a fresh schema, dropped afterwards (tables never collide)."""
    schema = f"xsm_wf_{uuid.uuid4().hex[:10]}"
    url = postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        engine.dispose()


@contextmanager
def captured_facts() -> Iterator[list[Fact]]:
    """Every fact emitted inside the block."""
    facts: list[Fact] = []
    stop = subscribe(facts.append)
    try:
        yield facts
    finally:
        stop()
