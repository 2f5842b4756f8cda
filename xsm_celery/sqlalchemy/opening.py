"""The ``sqlite://``, ``postgresql://`` and ``postgres://`` stores, registered with the seam.

Imported by ``xsm_celery.persistence.opening`` the first time such a URL is opened. Every
kind of store is served: a timer URL and a marker URL naming one database share its engine
(``engine_for``), and a workflow's family is built over one ``SQLAlchemyStore``.
"""

from __future__ import annotations

from xsm_celery.persistence.opening import Opener, StoreKind, StoreRequest, register_scheme
from xsm_celery.sqlalchemy.dead_letters import SQLAlchemyDeadLetterStore
from xsm_celery.sqlalchemy.inbox import SQLAlchemyInbox
from xsm_celery.sqlalchemy.outbox import SQLAlchemyOutboxStore
from xsm_celery.sqlalchemy.snapshots import SQLAlchemyStore
from xsm_celery.sqlalchemy.timers import SQLAlchemyAttemptMarkers, SQLAlchemyTimerStore

__all__ = ["SCHEMES"]

#: The URL schemes served here (a ``+driver`` suffix is allowed: ``postgresql+psycopg://``).
SCHEMES = ("sqlite", "postgresql", "postgres")


def _snapshots(request: StoreRequest) -> object:
    return SQLAlchemyStore(request.url, create_table=not request.existing_only)


def _dead_letters(request: StoreRequest) -> object:
    exists = request.existing_only
    return SQLAlchemyDeadLetterStore(request.url, create_table=not exists, must_exist=exists)


def _markers(request: StoreRequest) -> object:
    return SQLAlchemyAttemptMarkers(request.url, request.marker_ttl_s)


def _workflow(request: StoreRequest) -> object:
    return SQLAlchemyStore(request.url).workflow_family()


_OPENERS: dict[StoreKind, Opener] = {
    "snapshots": _snapshots,
    "inbox": lambda r: SQLAlchemyInbox(r.url),
    "outbox": lambda r: SQLAlchemyOutboxStore(r.url),
    "timers": lambda r: SQLAlchemyTimerStore(r.url),
    "dead_letters": _dead_letters,
    "markers": _markers,
    "workflow": _workflow,
}

for _scheme in SCHEMES:
    for _kind, _opener in _OPENERS.items():
        register_scheme(_scheme, _opener, kinds=[_kind], replace=False)
