"""Start and stop real ``celery worker`` and ``celery beat`` processes for the tests.

Each broker gets its own queue name per test session and its own Redis databases, so a
stale message from an earlier run can never reach these workers. Every wait has a timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.celery.workerapp"

#: Redis databases used by these tests only (broker, results and the tests' own counters).
BROKER_DB = 13
BACKEND_DB = 14


@dataclass
class Cluster:
    """One broker's configuration, shared by the workers, Beat and the test's producer."""

    broker: str
    backend: str
    workdir: Path
    queue: str = field(default_factory=lambda: f"xsm-tests-{uuid.uuid4().hex[:8]}")
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: The ``celery -A`` app the processes run, and extra environment they get.
    app: str = APP
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def dlq_url(self) -> str:
        """SQLite file of the dead-letter store the workers write to."""
        return f"sqlite:///{self.workdir / 'dead_letters.db'}"

    @property
    def timers_url(self) -> str:
        """SQLite file of the durable timers."""
        return f"sqlite:///{self.workdir / 'timers.db'}"

    def env(self) -> dict[str, str]:
        """Environment of every process of this cluster."""
        return {
            **os.environ,
            "XSM_TEST_BROKER": self.broker,
            "XSM_TEST_BACKEND": self.backend,
            "XSM_TEST_QUEUE": self.queue,
            "XSM_TEST_DLQ": self.dlq_url,
            "XSM_TEST_TIMERS": self.timers_url,
            "PYTHONPATH": str(ROOT),
            **self.extra_env,
        }

    def producer(self) -> Celery:
        """An app that sends tasks by name and reads their results."""
        app = Celery("xsm_test_producer", broker=self.broker, backend=self.backend)
        app.conf.task_default_queue = self.queue
        app.conf.broker_connection_retry_on_startup = True
        return app

    def start_worker(
        self, name: str, pool: str = "prefork", *extra: str
    ) -> subprocess.Popen[bytes]:
        """A worker on this cluster's queue (``extra``: more switches, e.g. ``-E``); returns
        once it answers a ping."""
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            self.app,
            "worker",
            "-P",
            pool,
            "-c",
            "1",
            "-n",
            f"{name}.{self.queue}@%h",
            "-Q",
            self.queue,
            "-l",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            *extra,
        ]
        proc = subprocess.Popen(args, cwd=self.workdir, env=self.env(), stdout=log, stderr=log)
        self.procs.append(proc)
        self._wait_ready(name, proc)
        return proc

    def start_beat(self) -> subprocess.Popen[bytes]:
        """A Beat process running the app's schedule (the timer scan every 0.25 s)."""
        log = open(self.workdir / "beat.log", "ab")  # noqa: SIM115 - lives with the process
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            self.app,
            "beat",
            "-l",
            "INFO",
            "-s",
            str(self.workdir / "beat-schedule"),
            "--max-interval",
            "1",
        ]
        proc = subprocess.Popen(args, cwd=self.workdir, env=self.env(), stdout=log, stderr=log)
        self.procs.append(proc)
        return proc

    def _wait_ready(self, name: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
        """Ping the worker's node by name until it answers (the first reply ends a ping)."""
        app = self.producer()
        node = _node_name(proc)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"worker {name} exited: {self.log(name)[-3000:]}")
                replies = app.control.ping(destination=[node], timeout=0.5, limit=1)
                if any(node in reply for reply in replies):
                    return
            raise TimeoutError(f"worker {name} not ready: {self.log(name)[-3000:]}")
        finally:
            app.close()

    def log(self, name: str) -> str:
        """What a process of this cluster wrote so far."""
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
        """Stop one process (SIGTERM: warm shutdown) and wait for it."""
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if proc in self.procs:
            self.procs.remove(proc)

    def close(self) -> None:
        """Stop every process (all at once: each warm shutdown takes a second or two), drop the queue."""
        procs, self.procs = list(self.procs), []
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        app = self.producer()
        try:
            with app.connection_for_write() as conn:
                conn.default_channel.queue_delete(self.queue)
        except Exception:  # best effort clean-up of a test queue
            pass
        finally:
            app.close()


def _node_name(proc: subprocess.Popen[bytes]) -> str:
    """The node name a worker was started with (``-n name@%h``), as it answers pings."""
    args = [str(arg) for arg in proc.args]  # type: ignore[union-attr]
    return args[args.index("-n") + 1].replace("%h", socket.gethostname())


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
