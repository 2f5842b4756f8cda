"""A relay process the fault test kills mid-batch: ``python -m tests.kombu.relay_victim``.

Arguments: the SQLite outbox file, the broker URL, a progress file. It claims one batch of
every pending row under the owner ``victim`` and publishes them slowly, writing how many
it has published after each one, until the test kills it with SIGKILL.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from xsm_celery.eda import OutboxRelay, SQLiteOutboxStore
from xsm_celery.kombu import KombuBrokerAdapter


class _Slow:
    """Publishes through the real adapter, reports progress, and takes its time."""

    def __init__(self, broker: KombuBrokerAdapter, progress: Path) -> None:
        self.broker = broker
        self.progress = progress
        self.count = 0

    def publish(self, topic: str, envelope: Any) -> None:
        self.broker.publish(topic, envelope)
        self.count += 1
        self.progress.write_text(str(self.count))
        time.sleep(0.05)


def main(outbox: str, url: str, progress: str) -> None:
    """Relay one big batch slowly; the test kills the process part way through."""
    store = SQLiteOutboxStore(outbox)
    with KombuBrokerAdapter(url) as broker:
        relay = OutboxRelay(store, _Slow(broker, Path(progress)), batch=10_000, owner="victim")
        relay.relay_once_sync()


if __name__ == "__main__":
    main(*sys.argv[1:4])
