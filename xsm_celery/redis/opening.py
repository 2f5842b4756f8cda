"""The Redis stores, registered with the seam for every Redis URL spelling: markers, inbox.

The schemes are ``redis``, ``rediss``, ``unix`` and ``sentinel`` (spelled as
``xsm_celery.redis.connection`` says).

Imported by ``xsm_celery.persistence.opening`` the first time such a URL is opened.
"""

from __future__ import annotations

from xsm_celery.persistence.opening import Opener, StoreKind, StoreRequest, register_scheme
from xsm_celery.redis.inbox import RedisInbox
from xsm_celery.redis.markers import RedisAttemptMarkers

__all__ = ["SCHEMES"]

#: The URL schemes served here.
SCHEMES = ("redis", "rediss", "unix", "sentinel")


def _markers(request: StoreRequest) -> object:
    return RedisAttemptMarkers(request.url, request.marker_ttl_s)


_OPENERS: dict[StoreKind, Opener] = {
    "markers": _markers,
    "inbox": lambda r: RedisInbox(r.url),
}

for _scheme in SCHEMES:
    for _kind, _opener in _OPENERS.items():
        register_scheme(_scheme, _opener, kinds=[_kind], replace=False)
