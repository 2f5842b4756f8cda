"""A real prefork worker (two children) serves /metrics and sends Celery events.

After retries, a dead letter, a relay run and a durable timer, the scraped values are the
sums over both children, the store figures are the database's, and the custom events reach
an event receiver, as ``celery events`` and Flower would see them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

from tests import services
from tests.celery.workers import BACKEND_DB, BROKER_DB, Cluster, wait_for
from tests.metrics.inproc import SECRET
from xsm_celery.eda import Envelope
from xsm_celery.sqlalchemy import SQLAlchemyOutboxStore
from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore

pytestmark = [pytest.mark.slow, pytest.mark.service, pytest.mark.timeout(180)]

APP = "tests.metrics.workerapp"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _db(url: str, db: int) -> str:
    return f"{url.rstrip('/').rsplit('/', 1)[0]}/{db}" if url.count("/") > 2 else f"{url}/{db}"


class Worker:
    """One prefork worker process of ``APP`` and what the test needs to talk to it."""

    def __init__(self, workdir: Path, app: str = APP, env: dict[str, str] | None = None) -> None:
        redis_url = services.REDIS_URL
        self.app = app
        self.extra_env = dict(env or {})
        self.cluster = Cluster(
            broker=_db(redis_url, BROKER_DB), backend=_db(redis_url, BACKEND_DB), workdir=workdir
        )
        self.port = _free_port()
        self.topic = f"xsm-obs-{uuid.uuid4().hex[:8]}"
        self.outbox_url = f"sqlite:///{workdir / 'outbox.db'}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **self.cluster.env(),
            "XSM_TEST_METRICS_PORT": str(self.port),
            "XSM_TEST_OUTBOX": self.outbox_url,
            **self.extra_env,
        }
        log = open(self.cluster.workdir / "w1.log", "ab")  # noqa: SIM115 - lives with the process
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            self.app,
            "worker",
            "-P",
            "prefork",
            "-c",
            "2",
            "-n",
            "w1@%h",
            "-Q",
            self.cluster.queue,
            "-l",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        self.proc = subprocess.Popen(
            args, cwd=self.cluster.workdir, env=env, stdout=log, stderr=log
        )
        self.cluster.procs.append(self.proc)
        self.cluster._wait_ready("w1", self.proc)

    def producer(self) -> Celery:
        return self.cluster.producer()

    def scrape_text(self) -> str:
        """The exposition text of one scrape."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as page:
            return str(page.read().decode())

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = self.scrape_text()
        assert SECRET not in text
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def close(self) -> None:
        self.cluster.close()
        app = self.producer()
        try:
            with app.connection_for_write() as conn:
                conn.default_channel.queue_delete(self.topic)
        except Exception:  # best effort clean-up of the relay's test queue
            pass
        finally:
            app.close()


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    """One sample of a scrape, None when missing."""
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A started prefork worker with metrics and events on."""
    services.require("redis")
    group = Worker(tmp_path_factory.mktemp("obs-worker"))
    outbox = SQLAlchemyOutboxStore(group.outbox_url)
    for n in range(3):
        outbox.add(group.topic, Envelope.new(type="order.paid", subject=f"o-{n}"))
    group.start()
    try:
        yield group
    finally:
        group.close()


class Events:
    """Every xsm-* Celery event the broker carries while the block runs."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.seen: list[dict[str, Any]] = []
        self.receiver: Any = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.app.connection_for_read() as conn:
            self.receiver = self.app.events.Receiver(conn, handlers={"*": self._on_event})
            self.ready.set()
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def _on_event(self, event: dict[str, Any]) -> None:
        if str(event.get("type", "")).startswith("xsm-"):
            self.seen.append(event)

    def __enter__(self) -> Events:
        self.thread.start()
        assert self.ready.wait(10)
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(timeout=5)


def test_scrape_after_retries_a_dead_letter_a_relay_and_a_timer(worker: Worker) -> None:
    """Counters add up over both children; store figures and events match what happened."""
    app = worker.producer()
    try:
        with Events(app) as events:
            flaky = app.send_task("obs.flaky", args=(uuid.uuid4().hex, 2), kwargs={"note": SECRET})
            assert flaky.get(timeout=60, interval=0.05) == "ok"
            doomed = app.send_task("obs.doomed", args=(SECRET,))
            with pytest.raises(Exception, match="refused"):
                doomed.get(timeout=60, interval=0.05)
            slow = app.send_task("obs.slow", args=(uuid.uuid4().hex,))
            timers = SQLAlchemyTimerStore(worker.cluster.timers_url)
            wait_for(lambda: timers.count() == 1, 30, "the durable retry row")
            time.sleep(1.0)
            app.send_task("xsm_celery.fire_timers")
            assert slow.get(timeout=60, interval=0.05) == "late"
            app.send_task("xsm_celery.relay_outbox")
            samples = wait_for(
                lambda: (
                    (s := worker.scrape())
                    and value(s, "xsm_outbox_relayed_rows_total", topic=worker.topic) == 3
                    and s
                ),
                30,
                "the relay's rows in the scrape",
            )
            wait_for(
                lambda: any(e["type"] == "xsm-dead-letter" for e in events.seen),
                15,
                "the dead-letter event",
            )
    finally:
        app.close()
    assert (
        value(samples, "xsm_task_retries_total", task="obs.flaky", exception="ConnectionError") == 2
    )
    assert value(samples, "xsm_task_attempts_total", task="obs.flaky", outcome="retry") == 2
    assert value(samples, "xsm_task_attempts_total", task="obs.flaky", outcome="succeeded") == 1
    assert value(samples, "xsm_task_attempts_total", task="obs.doomed", outcome="gave_up") == 1
    assert value(samples, "xsm_dead_letters_total", source="task", reason="non_retryable") == 1
    assert value(samples, "xsm_timers_scheduled_total", purpose="retry") == 1
    assert value(samples, "xsm_timers_fired_total", purpose="retry") == 1
    lag = value(samples, "xsm_timer_lag_seconds_sum", purpose="retry")
    assert lag is not None
    assert 0 <= lag < 30
    assert value(samples, "xsm_outbox_backlog") == 0
    assert value(samples, "xsm_timers_pending") == 0
    assert value(samples, "xsm_dead_letters_recent", window="1h", reason="non_retryable") == 1
    assert value(samples, "xsm_store_up", store="outbox") == 1
    kinds = [e["type"] for e in events.seen]
    assert kinds.count("xsm-retry-scheduled") == 3
    dead = next(e for e in events.seen if e["type"] == "xsm-dead-letter")
    assert dead["reason"] == "non_retryable"
    assert dead["uuid"] == doomed.id
    assert SECRET not in repr(events.seen)


def test_a_breaker_opened_in_a_child_shows_in_the_scrape_and_the_status(worker: Worker) -> None:
    """The child's breaker state reaches /metrics and the worker's xsm_states answer."""
    from xsm_celery.celery.worker.status import worker_states

    app = worker.producer()
    try:
        assert app.send_task("obs.trip").get(timeout=60, interval=0.05) == "open"
        states = worker_states(app, timeout=2)
    finally:
        app.close()
    samples = worker.scrape()
    assert value(samples, "xsm_process_breaker_state", breaker="psp") == 2
    assert (
        value(
            samples, "xsm_breaker_transitions_total", breaker="psp", scope="process", state="open"
        )
        == 1
    )
    assert [(s.kind, s.name, s.state) for s in states] == [("breaker", "psp", "open")]
    assert states[0].worker.startswith("w1@")
