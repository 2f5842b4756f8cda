"""What happens to a message whose body is not a usable envelope.

Such a message never reaches the dispatcher (there is no envelope to hand it), so the
adapter records it itself as a ``corrupt`` dead letter and acknowledges it: redelivering
it would fail the same way for ever. The record keeps the body's size and the error, not
the body: it is untrusted, may be huge, and may carry data nobody should read in a DLQ.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from xsm_celery.patterns.dead_letter import DeadLetter, DeadLetterReason

__all__ = ["UndecodableHandler"]

logger = logging.getLogger(__name__)

_MESSAGE_CAP = 500


class UndecodableHandler:
    """Write undecodable messages to a dead-letter store (or only log them without one)."""

    def __init__(self, dead_letters: Any = None) -> None:
        self.dead_letters = dead_letters

    def report(self, topic: str, message: Any, exc: Exception) -> bool:
        """Record the message; return True when it is safe to acknowledge it.

        False means nothing durable holds it, so the caller rejects it instead (a
        RabbitMQ dead-letter exchange, if one is configured, then receives it).
        """
        logger.warning(
            "undecodable message on %r: %s: %s", topic, type(exc).__name__, str(exc)[:_MESSAGE_CAP]
        )
        if self.dead_letters is None:
            return False
        record = corrupt_record(topic, message, exc)
        try:
            put = getattr(self.dead_letters, "put", None)
            (put or self.dead_letters)(record)
        except Exception:
            logger.exception("could not dead-letter an undecodable message on %r", topic)
            return False
        return True


def corrupt_record(topic: str, message: Any, exc: Exception) -> DeadLetter:
    """Return the ``corrupt`` dead letter describing an undecodable message."""
    body = getattr(message, "body", b"")
    size = len(body) if isinstance(body, bytes | bytearray | str) else 0
    return DeadLetter(
        machine_id="",
        state_id="",
        event={"type": "", "payload": {"bytes": size}},
        attempts=1,
        errors=[
            {
                "source": "broker",
                "name": "corrupt",
                "type": type(exc).__name__,
                "message": str(exc)[:_MESSAGE_CAP],
            }
        ],
        snapshot={},
        taken_at=time.time(),
        reason=DeadLetterReason.CORRUPT.value,
        topic=topic,
    )
