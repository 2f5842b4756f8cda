"""Turn a ``xsm_dead_letter_store`` value (an object or a URL) into a dead-letter store.

A URL means the same store here as in the Celery setting and the CLI's ``--dlq``, which
open it through ``xsm_celery.persistence.opening``: ``memory://name`` is the process's
memory store of that name (a worker's tasks and the code that inspects them in an eager test
then see one store), a SQL URL a ``SQLAlchemyDeadLetterStore``.
"""

from __future__ import annotations

from typing import Any

from xsm_celery.eda.opening import named_dead_letter_store, reset_memory_stores
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns.dead_letter import DeadLetterStoreProtocol
from xsm_celery.sqlalchemy.connect import safe_url
from xsm_celery.sqlalchemy.dead_letters import SQLAlchemyDeadLetterStore

__all__ = ["SUPPORTED_SCHEMES", "open_dead_letter_store", "reset_memory_stores"]

#: URL schemes ``open_dead_letter_store`` accepts (a ``+driver`` suffix is allowed on SQL ones).
SUPPORTED_SCHEMES = ("memory", "sqlite", "postgresql", "postgres")


def open_dead_letter_store(
    url_or_obj: Any, *, create_table: bool = True, must_exist: bool = False
) -> Any:
    """Return the dead-letter store that ``url_or_obj`` names.

    Args:
        url_or_obj: A store object (returned as is when it has the ``DeadLetterStore``
            methods), ``"memory://"`` or ``"memory://name"``, ``"sqlite:///rel.db"``,
            ``"sqlite:////abs.db"``, or ``"postgresql://user@host/db"`` (psycopg).
        create_table: Create the tables of a SQL store when missing; False opens only an
            existing store (what a reader wants).
        must_exist: Refuse a SQLite file that does not exist instead of creating it.

    Raises:
        ConfigurationError: an unsupported scheme, or an object that is not a store.
        StoreError: a SQL store that cannot be opened (see ``SQLAlchemyDeadLetterStore``).
    """
    if not isinstance(url_or_obj, str):
        if isinstance(url_or_obj, DeadLetterStoreProtocol):
            return url_or_obj
        raise ConfigurationError(
            f"{url_or_obj!r} is not a dead-letter store (it lacks put/get/list/audit...); "
            "pass a store object or a URL such as sqlite:///dead_letters.db"
        )
    url = url_or_obj.strip()
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme == "memory":
        return named_dead_letter_store(url)
    if scheme in SUPPORTED_SCHEMES:
        return SQLAlchemyDeadLetterStore(url, create_table=create_table, must_exist=must_exist)
    raise ConfigurationError(
        f"unsupported dead-letter store URL {safe_url(url)!r}; use memory://, "
        "sqlite:///path.db (four slashes for an absolute path) or postgresql://user@host/db"
    )
