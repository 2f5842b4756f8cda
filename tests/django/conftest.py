"""Django set-up for the app's tests: settings, databases, clean tables between tests.

Settings are passed to ``settings.configure()`` (not through ``DJANGO_SETTINGS_MODULE``) so
nothing leaks into other test areas. The SQLite database is a fresh temporary file migrated
once per session; the PostgreSQL one is a test database created on first use and dropped at
the end. Rows of this app and of ``auth`` are deleted after every test, which also works for
the browser test, whose server thread uses its own connection.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.conf import settings
from django.db import transaction
from django.db.backends.signals import connection_created

from tests import services
from tests.django.project import settings as project_settings
from tests.pgbouncer import PgBouncer

if not settings.configured:
    settings.configure(
        **{
            name: getattr(project_settings, name)
            for name in dir(project_settings)
            if name.isupper()
        }
    )
    django.setup()


@pytest.fixture(autouse=True)
def _db_access(request: pytest.FixtureRequest) -> Iterator[None]:
    """Allow database access even when pytest-django is installed and blocks it."""
    if request.config.pluginmanager.hasplugin("django"):
        blocker = request.getfixturevalue("django_db_blocker")
        with blocker.unblock():
            yield
    else:
        yield


@pytest.fixture(scope="session")
def _sqlite_db(request: pytest.FixtureRequest) -> str:
    """The migrated SQLite database, alias ``default``."""
    from django.core.management import call_command

    with _blocker(request):
        call_command("migrate", database="default", verbosity=0, interactive=False)
    return "default"


@pytest.fixture(scope="session")
def _postgres_db(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated PostgreSQL test database, alias ``postgres``; dropped at session end."""
    services.require("postgres")
    from django.db import connections

    connection = connections["postgres"]
    old_name = connection.settings_dict["NAME"]
    with _blocker(request):
        _drop_stale_databases(connection)
        connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    yield "postgres"
    with _blocker(request):
        # Threads of concurrency tests leave their own connections open; end them, or
        # PostgreSQL refuses to drop a database other sessions are using.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        connection.creation.destroy_test_db(old_name, verbosity=0)


def _drop_stale_databases(connection: Any) -> None:
    """Drop test databases left by runs that were killed (their process is gone)."""
    if not os.path.isdir("/proc"):
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE 'xsm_django_test_%%'")
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        pid = name.rsplit("_", 1)[-1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            with connection._nodb_cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _blocker(request: pytest.FixtureRequest) -> Any:
    if request.config.pluginmanager.hasplugin("django"):
        return request.getfixturevalue("django_db_blocker").unblock()
    import contextlib

    return contextlib.nullcontext()


#: Tables emptied after each test, children before parents.
_AUTH_TABLES = (
    "django_admin_log",
    "django_session",
    "auth_user_user_permissions",
    "auth_user_groups",
    "auth_user",
)


def _clean(alias: str) -> None:
    from django.apps import apps
    from django.db import connections

    connection = connections[alias]
    tables = [m._meta.db_table for m in apps.get_app_config("xsm_celery").get_models()]
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        for table in (*tables, *_AUTH_TABLES):
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")


def _fast_sqlite(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Skip fsync on the throwaway SQLite file: the tests never survive a power cut."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA synchronous = OFF")


connection_created.connect(_fast_sqlite)


@pytest.fixture
def sqlite_db(_sqlite_db: str) -> Iterator[str]:
    """Alias of the SQLite database, emptied after the test."""
    yield _sqlite_db
    _clean(_sqlite_db)


@pytest.fixture
def postgres_db(postgres_url: str, _postgres_db: str) -> Iterator[str]:
    """Alias of the PostgreSQL test database, emptied after the test."""
    yield _postgres_db
    _clean(_postgres_db)


@pytest.fixture(scope="session")
def _pgbouncer_db(pgbouncer: PgBouncer, _postgres_db: str) -> Iterator[str]:
    """The PostgreSQL test database through PgBouncer in transaction mode, alias ``pgbouncer``.

    The alias is added once the pooler's port is known; it needs no option of its own (see
    docs/operations.md), so it is the ``postgres`` alias with another host and port.
    """
    from django.db import connections

    direct = connections[_postgres_db].settings_dict
    connections.settings["pgbouncer"] = {**direct, "HOST": "127.0.0.1", "PORT": str(pgbouncer.port)}
    yield "pgbouncer"
    connections["pgbouncer"].close()


@pytest.fixture
def pgbouncer_db(_pgbouncer_db: str) -> Iterator[str]:
    """Alias of the PostgreSQL test database through PgBouncer, emptied after the test."""
    yield _pgbouncer_db
    _clean(_pgbouncer_db)


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer"])
def db_alias(request: pytest.FixtureRequest) -> str:
    """Each database in turn: SQLite, PostgreSQL, and PostgreSQL through PgBouncer."""
    alias: str = request.getfixturevalue(f"{request.param}_db")
    return alias


@pytest.fixture
def operator(sqlite_db: str) -> Any:
    """A logged-in superuser (a ``django.test.Client``)."""
    from django.test import Client

    from tests.django.admin_support import PASSWORD, make_user

    make_user("ops", superuser=True)
    client = Client()
    assert client.login(username="ops", password=PASSWORD)
    return client
