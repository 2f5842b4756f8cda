"""The app factory and the one-delivery runner the admission tests share.

Each test module wraps ``app_factory`` in its own ``make_app`` fixture.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from celery import Celery

from tests import services

__all__ = ["app_factory", "closed_port", "deliver"]


def closed_port() -> int:
    """A local TCP port nothing listens on (a Redis that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def app_factory() -> Iterator[Callable[..., Celery]]:
    """Build apps on a memory broker with the fleet on the shared Redis; clean up after."""
    services.require("redis")
    prefix = f"xsm-test-admit-{uuid.uuid4().hex[:8]}:"
    apps: list[Celery] = []

    def build(**conf: Any) -> Celery:
        app = Celery(f"admission-{uuid.uuid4().hex[:6]}", set_as_current=False)
        queue = f"xsm-admit-{uuid.uuid4().hex[:8]}"
        defaults = {
            "broker_url": "memory://",
            "task_default_queue": queue,
            "xsm_redis_url": services.REDIS_URL,
            "xsm_fleet_prefix": prefix,
            "xsm_dead_letter_store": f"memory://{queue}",
            "xsm_attempt_markers": "memory://",
        }
        app.conf.update({**defaults, **conf})
        apps.append(app)
        return app

    yield build
    import redis

    client = redis.Redis.from_url(services.REDIS_URL)
    keys = list(client.scan_iter(match=f"{prefix}*", count=500))
    if keys:
        client.delete(*keys)


def deliver(
    task: Any, *args: Any, headers: dict[str, Any] | None = None, task_id: str | None = None
) -> Any:
    """Run one delivery of ``task`` in this process, as a worker would."""
    task.push_request(
        id=task_id or str(uuid.uuid4()),
        args=list(args),
        kwargs={},
        headers=headers or {},
        delivery_info={"exchange": "", "routing_key": task.app.conf.task_default_queue},
        is_eager=False,
        called_directly=False,
        retries=0,
        hostname="test@host",
    )
    try:
        return task(*args)
    finally:
        task.pop_request()
