"""Two real workers on one host, one ``xsm-celery metrics`` endpoint for the whole app.

The workers share a ``PROMETHEUS_MULTIPROC_DIR`` and serve no port; the metrics process
serves the directory, the queue lengths and the workers that answer a ping. The scrape is
checked against what the test made happen: every task of the app (plain ones too) by name,
state and worker, a routed queue's backlog, a worker stopped. The shipped dashboard and
alert rules are checked against the same scrape.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import services
from tests.celery.workers import BACKEND_DB, BROKER_DB, Cluster, _node_name, wait_for
from tests.metrics.promql import exported_names, shipped_expressions
from tests.metrics.test_worker import _db, _free_port
from xsm_celery.sqlalchemy import SQLAlchemyOutboxStore
from xsm_celery.sqlalchemy.dead_letters import SQLAlchemyDeadLetterStore
from xsm_celery.sqlalchemy.timers import SQLAlchemyTimerStore

pytestmark = [pytest.mark.slow, pytest.mark.service, pytest.mark.timeout(240)]

APP = "tests.metrics.fleetapp"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Fleet:
    """Two workers of ``APP`` recording into one directory, and the process serving it."""

    def __init__(self, workdir: Path) -> None:
        redis_url = services.REDIS_URL
        self.metrics_dir = workdir / "prometheus"
        self.metrics_dir.mkdir()
        self.cluster = Cluster(
            broker=_db(redis_url, BROKER_DB),
            backend=_db(redis_url, BACKEND_DB),
            workdir=workdir,
            app=APP,
            extra_env={
                "PROMETHEUS_MULTIPROC_DIR": str(self.metrics_dir),
                "XSM_TEST_OUTBOX": f"sqlite:///{workdir / 'outbox.db'}",
            },
        )
        self.parked = f"{self.cluster.queue}-parked"
        self.port = _free_port()
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.nodes: dict[str, str] = {}

    def start(self) -> None:
        # The stores exist before the exporter's first scrape opens them (it creates none).
        SQLAlchemyDeadLetterStore(self.cluster.dlq_url)
        SQLAlchemyTimerStore(self.cluster.timers_url)
        SQLAlchemyOutboxStore(self.cluster.extra_env["XSM_TEST_OUTBOX"])
        for name in ("w1", "w2"):
            proc = self.cluster.start_worker(name)
            self.workers[name] = proc
            self.nodes[name] = _node_name(proc)
        log = open(self.cluster.workdir / "metrics.log", "ab")  # noqa: SIM115 - lives with the process
        command = shutil.which("xsm-celery", path=str(Path(sys.executable).parent))
        assert command is not None
        args = [command, "metrics", "--app", APP, "--port", str(self.port), "--ping-timeout", "1"]
        proc = subprocess.Popen(
            args, cwd=self.cluster.workdir, env=self.cluster.env(), stdout=log, stderr=log
        )
        self.cluster.procs.append(proc)
        wait_for(self._answers, 30, "the xsm-celery metrics endpoint", every=0.2)

    def _answers(self) -> bool:
        try:
            self.text()
        except (urllib.error.URLError, ConnectionError):
            return False
        return True

    def text(self) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as page:
            body: bytes = page.read()
        return body.decode()

    def scrape(self) -> Samples:
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(self.text())
            for sample in family.samples
        }

    def close(self) -> None:
        self.cluster.close()
        app = self.cluster.producer()
        try:
            with app.connection_for_write() as conn:
                conn.default_channel.queue_delete(self.parked)
        except Exception:  # best effort clean-up of the parked test queue
            pass
        finally:
            app.close()


def total(samples: Samples, metric: str, **labels: str) -> float:
    """The sum of every sample of ``metric`` whose labels include ``labels``."""
    return sum(
        v
        for (n, sample_labels), v in samples.items()
        if n == metric and labels.items() <= dict(sample_labels).items()
    )


def by_host(samples: Samples, metric: str, **labels: str) -> dict[str, float]:
    """``hostname -> value`` summed over the other labels."""
    found: dict[str, float] = {}
    for (n, sample_labels), v in samples.items():
        flat = dict(sample_labels)
        if n == metric and labels.items() <= flat.items():
            found[flat["hostname"]] = found.get(flat["hostname"], 0.0) + v
    return found


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Two started workers sharing one metric directory, and ``xsm-celery metrics`` on it."""
    services.require("redis")
    group = Fleet(tmp_path_factory.mktemp("fleet-metrics"))
    try:
        group.start()
        yield group
    finally:
        group.close()


@pytest.fixture(scope="module")
def ran(fleet: Fleet) -> Samples:
    """The scrape after the scripted run.

    12 adds, a failure, a retry, a chart task, a chart task's dead letter, 3 parked messages.
    """
    app = fleet.cluster.producer()
    try:
        adds = [app.send_task("fleet.add", args=(n, 1)) for n in range(12)]
        assert [r.get(timeout=60, interval=0.05) for r in adds] == [n + 1 for n in range(12)]
        with pytest.raises(KeyError):
            app.send_task("fleet.boom").get(timeout=60, interval=0.05)
        again = app.send_task("fleet.again", args=(uuid.uuid4().hex,))
        assert again.get(timeout=60, interval=0.05) == "done"
        assert app.send_task("fleet.chart").get(timeout=60, interval=0.05) == "charted"
        with pytest.raises(ValueError):
            app.send_task("fleet.refused").get(timeout=60, interval=0.05)
        for _ in range(3):
            app.send_task("fleet.parked", queue=fleet.parked)
    finally:
        app.close()
    return wait_for(
        lambda: (
            (s := fleet.scrape())
            and total(s, "celery_task_succeeded_total", name="fleet.chart") == 1
            and total(s, "xsm_dead_letters_recent", window="1h") == 1
            and s
        ),
        30,
        "the chart task in the scrape",
    )


def test_every_task_of_both_workers_is_counted_on_one_endpoint(fleet: Fleet, ran: Samples) -> None:
    """Plain and chart tasks, by name and state, from both workers, add up on one scrape."""
    hosts = by_host(ran, "celery_task_succeeded_total", name="fleet.add")
    assert set(hosts) == {fleet.nodes["w1"], fleet.nodes["w2"]}
    assert sum(hosts.values()) == 12
    assert total(ran, "celery_task_received_total", name="fleet.add") == 12
    assert total(ran, "celery_task_started_total", name="fleet.add") == 12
    assert total(ran, "celery_task_failed_total", name="fleet.add") == 0
    assert total(ran, "celery_task_failed_total", name="fleet.boom", exception="KeyError") == 1
    assert total(ran, "celery_task_succeeded_total", name="fleet.boom") == 0
    assert total(ran, "celery_task_retried_total", name="fleet.again") == 1
    assert total(ran, "celery_task_succeeded_total", name="fleet.again") == 1
    assert total(ran, "celery_task_started_total", name="fleet.again") == 2
    # The retry is a new message the worker published.
    assert total(ran, "celery_task_sent_total", name="fleet.again") == 1
    assert total(ran, "celery_task_succeeded_total", name="fleet.chart") == 1
    assert total(ran, "xsm_task_attempts_total", task="fleet.chart", outcome="succeeded") == 1
    assert total(ran, "celery_task_failed_total", name="fleet.refused", exception="ValueError") == 1
    assert total(ran, "xsm_dead_letters_recent", window="1h", reason="non_retryable") == 1
    queue = fleet.cluster.queue
    assert total(ran, "celery_task_succeeded_total", queue_name=queue) == 12 + 1 + 1


def test_runtime_is_timed_per_task_and_state(ran: Samples) -> None:
    """``celery_task_runtime`` has one observation per finished attempt, of a plausible length."""
    count = total(ran, "celery_task_runtime_count", name="fleet.add", state="succeeded")
    seconds = total(ran, "celery_task_runtime_sum", name="fleet.add", state="succeeded")
    assert count == 12
    assert 12 * 0.05 <= seconds < 12 * 5
    assert total(ran, "celery_task_runtime_count", name="fleet.boom", state="failed") == 1
    assert total(ran, "celery_task_runtime_count", name="fleet.again", state="retried") == 1


def test_queue_lengths_are_read_from_the_broker(fleet: Fleet, ran: Samples) -> None:
    """The routed queue nobody consumes holds the 3 parked messages; the worked one is empty."""
    assert total(ran, "celery_queue_length", queue_name=fleet.parked) == 3
    assert total(ran, "celery_queue_length", queue_name=fleet.cluster.queue) == 0


def test_every_shipped_expression_names_an_exported_metric(fleet: Fleet, ran: Samples) -> None:
    """Each metric named by the dashboard and the alert rules is in the scrape or registered."""
    names = exported_names(fleet.text())
    expressions = shipped_expressions()
    assert len(expressions) >= 10
    missing = {
        where: sorted(used - names) for where, used in expressions.items() if not used <= names
    }
    assert missing == {}


def test_a_stopped_worker_reads_down_and_keeps_its_counts(fleet: Fleet, ran: Samples) -> None:
    """After w2 stops, ``celery_worker_up`` says 0 for it, 1 for w1; its counts stay."""
    assert total(ran, "celery_worker_up", hostname=fleet.nodes["w1"]) == 1
    assert total(ran, "celery_worker_up", hostname=fleet.nodes["w2"]) == 1
    before = by_host(ran, "celery_task_succeeded_total", name="fleet.add")
    fleet.cluster.stop(fleet.workers["w2"])
    time.sleep(0.5)
    after = fleet.scrape()
    assert total(after, "celery_worker_up", hostname=fleet.nodes["w2"]) == 0
    assert total(after, "celery_worker_up", hostname=fleet.nodes["w1"]) == 1
    assert by_host(after, "celery_task_succeeded_total", name="fleet.add") == before
