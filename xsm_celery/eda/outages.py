"""Which publish failures mean "the broker is down" rather than "it refused this message".

The relay retries an outage for ever without counting it: nothing is wrong with the row,
and counting it would set every row of the outbox aside one after another while the
broker is away. A refusal (a negative confirm, a declare the broker rejects, an envelope
the adapter cannot encode) fails the same way on every retry, so the relay counts it
against the row and sets the row aside after ``max_attempts``. Keeping the split in one
place is what stops a refusal from blocking the outbox for ever, and an outage from
dead-lettering good rows.

The module stays standard library only, like the rest of ``xsm_celery.eda``: the driver
errors of kombu, py-amqp and redis-py are looked up only when their module is already
imported (an exception of a module nobody imported cannot have been raised).
"""

from __future__ import annotations

import sys

from xsm_celery.errors import BrokerUnavailableError, StoreUnavailableError, XsmError

__all__ = ["is_broker_outage"]

#: Connection-level errors of the broker drivers, by module and class name. A channel
#: error (amqp ``ChannelError``, redis ``ResponseError``) is the broker refusing one
#: command, so it is absent on purpose.
_DRIVER_OUTAGES: tuple[tuple[str, str], ...] = (
    ("kombu.exceptions", "OperationalError"),
    ("amqp.exceptions", "ConnectionError"),
    ("redis.exceptions", "ConnectionError"),
    ("redis.exceptions", "TimeoutError"),
    ("redis.exceptions", "BusyLoadingError"),
    ("redis.exceptions", "ReadOnlyError"),
)


def _driver_outage_types() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    for module_name, class_name in _DRIVER_OUTAGES:
        module = sys.modules.get(module_name)
        kind = getattr(module, class_name, None) if module is not None else None
        if isinstance(kind, type) and issubclass(kind, BaseException):
            found.append(kind)
    return tuple(found)


def _is_outage_type(exc: BaseException) -> bool:
    if isinstance(exc, BrokerUnavailableError | StoreUnavailableError):
        return True
    if isinstance(exc, XsmError):
        # Our own errors say what they are: anything but the two above is a refusal.
        return False
    # ConnectionRefusedError, TimeoutError (asyncio's too), socket.gaierror, ssl errors...
    return isinstance(exc, (OSError, *_driver_outage_types()))


def is_broker_outage(exc: BaseException) -> bool:
    """Whether ``exc`` from a publish says the broker is unreachable (retry, don't count).

    ``BrokerUnavailableError``, ``OSError`` and the drivers' connection errors are outages,
    also when they are the explicit cause (``raise ... from``) of a plain exception an
    adapter raised. Everything else (``BrokerPublishError``, ``EnvelopeError``, a
    ``ValueError`` or ``TypeError`` while encoding, a channel error) is a refusal of the
    message.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _is_outage_type(current):
            return True
        if isinstance(current, XsmError):
            # A refusal of ours wraps the driver error it judged; do not second-guess it.
            return False
        current = current.__cause__
    return False
