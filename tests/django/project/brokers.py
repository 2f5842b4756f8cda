"""A broker factory for ``XSM_CELERY["BROKER"]`` in the relay command's tests."""

from __future__ import annotations

from xsm_celery.eda import SyncFakeBrokerAdapter

#: The one in-process broker the relay publishes to; tests read ``published_on``.
BROKER = SyncFakeBrokerAdapter()


def fake_broker() -> SyncFakeBrokerAdapter:
    """Return the shared fake broker."""
    return BROKER
