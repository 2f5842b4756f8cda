"""The ``memory://`` stores of this layer: in-process, for tests and eager runs.

Imported by ``xsm_celery.persistence.opening`` the first time a ``memory://`` URL is opened.
Each opening is a fresh store, so two workflows, or two tests, never see each other's
instances. Memory dead-letter stores, shared by name, are ``xsm_celery.eda.opening``'s.
"""

from __future__ import annotations

from xsm_celery.persistence.family import memory_family
from xsm_celery.persistence.inbox import MemoryInbox
from xsm_celery.persistence.markers import MemoryAttemptMarkers
from xsm_celery.persistence.memory import MemoryStore
from xsm_celery.persistence.opening import Opener, StoreKind, StoreRequest, register_scheme

__all__: list[str] = []


def _workflow(request: StoreRequest) -> object:
    return memory_family(MemoryStore(), request.url)


_OPENERS: dict[StoreKind, Opener] = {
    "snapshots": lambda _: MemoryStore(),
    "inbox": lambda _: MemoryInbox(),
    "markers": lambda _: MemoryAttemptMarkers(),
    "workflow": _workflow,
}

for _kind, _opener in _OPENERS.items():
    register_scheme("memory", _opener, kinds=[_kind], replace=False)
