"""redis:// and rediss:// URLs open the Redis attempt markers and inbox."""

from __future__ import annotations

import uuid

import pytest

from xsm_celery.persistence.opening import open_store
from xsm_celery.redis import RedisInbox
from xsm_celery.redis.markers import RedisAttemptMarkers

pytestmark = pytest.mark.service


def test_markers_open_on_the_redis_at_the_url(redis_url: str) -> None:
    """A redis:// URL gives Redis markers with the requested lifetime, read back as ints."""
    markers = open_store(redis_url, "markers", setting="xsm_attempt_markers", marker_ttl_s=60)
    assert isinstance(markers, RedisAttemptMarkers)
    task_id = uuid.uuid4().hex
    markers.mark(task_id, 2)
    assert markers.started(task_id) == 2


def test_an_inbox_opens_on_the_redis_at_the_url(redis_url: str) -> None:
    """A redis:// URL gives a RedisInbox that claims a key once."""
    inbox = open_store(redis_url.rsplit("/", 1)[0] + "/5", "inbox")
    assert isinstance(inbox, RedisInbox)
    scope = f"opening-{uuid.uuid4().hex}"
    try:
        assert inbox.claim(scope, "m-1", "fp", ttl_s=60)
        assert not inbox.claim(scope, "m-1", "fp", ttl_s=60)
    finally:
        inbox.forget(scope)


def test_rediss_is_served_too() -> None:
    """TLS URLs open the same classes (nothing connects before the first command)."""
    assert isinstance(open_store("rediss://cache:6380/2", "markers"), RedisAttemptMarkers)
    assert isinstance(open_store("rediss://cache:6380/2", "inbox"), RedisInbox)
