"""``"django"`` and ``django://<alias>``: the Django app's stores, registered with the seam.

Imported by ``xsm_celery.persistence.opening`` the first time such a value is opened, so
``app.conf.xsm_dead_letter_store = "django"`` puts a Celery shop's dead letters, timers and
outbox rows in the app's tables, where Django admin shows them. ``"django"`` is the alias
``XSM_CELERY["DATABASE"]`` names; ``django://replica`` is the alias ``replica``.
"""

from __future__ import annotations

from collections.abc import Callable

from django.apps import apps

from xsm_celery.django.stores.dead_letters import DjangoDeadLetterStore
from xsm_celery.django.stores.inbox import DjangoInbox
from xsm_celery.django.stores.outbox import DjangoOutboxStore
from xsm_celery.django.stores.snapshots import DjangoSnapshotStore
from xsm_celery.django.stores.timers import DjangoTimerStore
from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.opening import StoreKind, StoreRequest, register_scheme

__all__ = ["alias_of"]

_PREFIX = "django://"

#: The class serving each kind; each takes the alias as ``using`` (None: the default one).
_CLASSES: dict[StoreKind, Callable[..., object]] = {
    "dead_letters": DjangoDeadLetterStore,
    "timers": DjangoTimerStore,
    "outbox": DjangoOutboxStore,
    "snapshots": DjangoSnapshotStore,
    "inbox": DjangoInbox,
}


def alias_of(url: str) -> str | None:
    """The database alias ``url`` names; None for ``"django"`` (``XSM_CELERY["DATABASE"]``)."""
    if not url.startswith(_PREFIX):
        return None
    return url[len(_PREFIX) :] or None


def _ready(request: StoreRequest) -> None:
    if not apps.ready or not apps.is_installed("xsm_celery.django"):
        raise ConfigurationError(
            f"{request.url!r} names the Django stores: call django.setup() first and add "
            "'xsm_celery.django' to INSTALLED_APPS"
        )


def _store(request: StoreRequest) -> object:
    _ready(request)
    return _CLASSES[request.kind](using=alias_of(request.url))


def _workflow(request: StoreRequest) -> object:
    _ready(request)
    return DjangoSnapshotStore(using=alias_of(request.url)).workflow_family()


register_scheme("django", _store, kinds=list(_CLASSES), replace=False)
register_scheme("django", _workflow, kinds=["workflow"], replace=False)
