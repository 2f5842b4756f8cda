"""Reading what a test app published: the messages on its default queue."""

from __future__ import annotations

from typing import Any

from celery import Celery


def drain_queue(app: Celery, timeout: float = 0.2) -> list[Any]:
    """The messages waiting on ``app``'s default queue, acknowledged and in order.

    Stops at the first wait longer than ``timeout`` seconds for the next message.
    """
    found = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(app.conf.task_default_queue)
        try:
            while True:
                message = queue.get(timeout=timeout)
                found.append(message)
                message.ack()
        except queue.Empty:
            pass
        finally:
            queue.close()
    return found
