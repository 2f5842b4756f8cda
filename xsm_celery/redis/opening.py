"""The ``redis://`` and ``rediss://`` stores, registered with the seam: attempt markers, inbox.

Imported by ``xsm_celery.persistence.opening`` the first time such a URL is opened.
"""

from __future__ import annotations

from xsm_celery.persistence.opening import Opener, StoreKind, StoreRequest, register_scheme
from xsm_celery.redis.inbox import RedisInbox
from xsm_celery.redis.markers import RedisAttemptMarkers

__all__ = ["SCHEMES"]

#: The URL schemes served here.
SCHEMES = ("redis", "rediss")


def _markers(request: StoreRequest) -> object:
    return RedisAttemptMarkers(request.url, request.marker_ttl_s)


_OPENERS: dict[StoreKind, Opener] = {
    "markers": _markers,
    "inbox": lambda r: RedisInbox(r.url),
}

for _scheme in SCHEMES:
    for _kind, _opener in _OPENERS.items():
        register_scheme(_scheme, _opener, kinds=[_kind], replace=False)
