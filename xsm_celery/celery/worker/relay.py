"""The outbox relay as a Celery task, ``xsm_celery.relay_outbox``, run by Beat.

``Xsm.beat_schedule(relay_every=5)`` schedules the task; each run drains the outbox in
batches until a batch comes back short (or ``max_batches`` ran). Several workers may run
it at the same moment (a slow run overlapping the next tick, one Beat per region): every
run leases its rows (``claim``), so no row is published by two live relays at once, and
the rows of a worker killed mid-batch are published by a later run once the lease expires.

Configure it with ``install_relay(app, outbox, ...)`` or with settings::

    app.conf.xsm_outbox_store = "postgresql://app@db/orders"   # or an OutboxStore
    app.conf.xsm_relay_batch = 500

The broker defaults to the app's own (``app.connection_for_write()``) through
``KombuBrokerAdapter``, so events travel beside the tasks.
"""

from __future__ import annotations

import os
import socket
import threading
import weakref
from dataclasses import dataclass, replace
from typing import Any

from celery import shared_task

from xsm_celery.celery.app import RELAY_OUTBOX_TASK
from xsm_celery.checks import positive_int
from xsm_celery.eda.opening import open_outbox
from xsm_celery.eda.outbox_protocols import OutboxStore
from xsm_celery.eda.relay import DEFAULT_BATCH, DEFAULT_MAX_ATTEMPTS, OutboxRelay
from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S
from xsm_celery.process import current_pid

__all__ = [
    "DEFAULT_MAX_BATCHES",
    "DEFAULT_RELAY_BATCH",
    "RELAY_OUTBOX_TASK",
    "RelayConfig",
    "install_relay",
    "outbox_store",
    "relay_for",
    "relay_outbox",
    "relay_pending",
]

#: Rows one batch of the Beat relay publishes: the relay's own default, in one home.
DEFAULT_RELAY_BATCH = DEFAULT_BATCH
#: Batches one task run publishes at most before leaving the rest to the next tick.
DEFAULT_MAX_BATCHES = 100

_KEYS = {
    "xsm_outbox_store": "outbox",
    "xsm_relay_broker_url": "broker",
    "xsm_relay_batch": "batch",
    "xsm_relay_lease_s": "lease_s",
    "xsm_relay_max_batches": "max_batches",
    "xsm_relay_max_attempts": "max_attempts",
    "xsm_relay_owner": "owner",
    "xsm_event_partitions": "partitions",
}


@dataclass(frozen=True)
class RelayConfig:
    """What the relay task of one app publishes from, to, and how much per run."""

    outbox: Any = None
    broker: Any = None
    batch: int = DEFAULT_RELAY_BATCH
    lease_s: float = DEFAULT_CLAIM_LEASE_S
    max_batches: int = DEFAULT_MAX_BATCHES
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    owner: str | None = None
    partitions: int = 1


_installed: weakref.WeakKeyDictionary[Any, RelayConfig] = weakref.WeakKeyDictionary()
_relays: weakref.WeakKeyDictionary[Any, tuple[int, OutboxRelay]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def install_relay(app: Any, outbox: Any, *, broker: Any = None, **options: Any) -> None:
    """Make ``xsm_celery.relay_outbox`` relay ``outbox`` for ``app``.

    Args:
        app: The Celery app whose workers run the task.
        outbox: An ``OutboxStore`` (shared with the snapshot store that writes it) or a
            SQLAlchemy URL opened with ``SQLAlchemyOutboxStore``.
        broker: A ``SyncBrokerAdapter`` or a broker URL; the app's broker by default.
        options: ``batch``, ``lease_s``, ``max_batches``, ``max_attempts`` (refusals of
            one row before it is set aside as failed), ``owner``, ``partitions`` (must
            match the consumers' ``partitions``).
    """
    unknown = sorted(set(options) - set(RelayConfig.__dataclass_fields__))
    if unknown:
        raise ConfigurationError(
            f"install_relay() got unknown option(s) {', '.join(unknown)}; valid ones are "
            "batch, lease_s, max_batches, max_attempts, owner, partitions"
        )
    config = RelayConfig(outbox=outbox, broker=broker, **options)
    _check(config)
    with _lock:
        _installed[app] = config
        _relays.pop(app, None)


def relay_for(app: Any) -> OutboxRelay:
    """The relay of ``app`` in this process, built on first use (never across a fork)."""
    pid = current_pid()
    with _lock:
        found = _relays.get(app)
        if found is not None and found[0] == pid:
            return found[1]
        relay = _build(app, _config(app))
        _relays[app] = (pid, relay)
        return relay


def _config(app: Any) -> RelayConfig:
    installed = _installed.get(app)
    if installed is not None:
        return installed
    values = {field: app.conf.get(key) for key, field in _KEYS.items()}
    config = replace(RelayConfig(), **{k: v for k, v in values.items() if v is not None})
    if config.outbox is None:
        raise ConfigurationError(
            "the outbox relay has no outbox: call install_relay(app, outbox) or set "
            "app.conf.xsm_outbox_store to an OutboxStore or a database URL"
        )
    _check(config)
    return config


def _check(config: RelayConfig) -> None:
    for name in ("batch", "max_batches", "max_attempts", "partitions"):
        positive_int(f"relay option {name}", getattr(config, name))
    if not (isinstance(config.lease_s, int | float) and config.lease_s > 0):
        raise ConfigurationError(f"relay option lease_s={config.lease_s!r} must be > 0 seconds")


def outbox_store(app: Any) -> OutboxStore | None:
    """The outbox ``app``'s relay drains, opened; None when no relay is configured."""
    config = _installed.get(app)
    if config is None:
        if app.conf.get("xsm_outbox_store") is None:
            return None
        config = _config(app)
    return _open_outbox(config.outbox)


def _open_outbox(outbox: Any) -> OutboxStore:
    # A URL names the same table the application's snapshot store writes (SQLAlchemy,
    # Django), so the seam opens it as it opens every other store.
    return open_outbox(outbox, setting="xsm_outbox_store")


def _build(app: Any, config: RelayConfig) -> OutboxRelay:
    outbox = _open_outbox(config.outbox)
    broker = config.broker
    if broker is None or isinstance(broker, str):
        # celery may use kombu: the relay publishes over the app's own broker connection.
        from xsm_celery.kombu import KombuBrokerAdapter

        target = broker if isinstance(broker, str) else app.connection_for_write()
        broker = KombuBrokerAdapter(target, partitions=config.partitions)
    owner = config.owner or f"{socket.gethostname()}:{os.getpid()}"
    return OutboxRelay(
        outbox,
        broker,
        batch=config.batch,
        owner=owner,
        lease_s=config.lease_s,
        max_attempts=config.max_attempts,
    )


def relay_pending(app: Any) -> int:
    """Relay ``app``'s outbox until a batch comes back short; return the rows published."""
    config = _installed.get(app) or _config(app)
    return relay_for(app).relay_all_sync(max_batches=config.max_batches)


@shared_task(name=RELAY_OUTBOX_TASK, bind=True, ignore_result=True)
def relay_outbox(self: Any) -> int:
    """Beat task: publish the outbox's pending rows through the broker, leased."""
    return relay_pending(self.app)
