"""Start and stop the demo's real Celery worker process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from xsm_celery.demo.app import QUEUE
from xsm_celery.demo.progress import ProgressLog

__all__ = ["WorkerProcess"]

#: Worker processes in the prefork pool: enough that the one that kills itself is not
#: the only one left working.
CONCURRENCY = 3


class WorkerProcess:
    """``celery -A xsm_celery.demo.app worker`` with a prefork pool, logging to a file."""

    def __init__(self, data: Path) -> None:
        self.log_path = data / "worker.log"
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "xsm_celery.demo.app",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            str(CONCURRENCY),
            "--queues",
            QUEUE,
            "--hostname",
            "xsm-demo@%h",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        with open(self.log_path, "ab") as log:
            # A session of its own: the demo stops the worker and its pool children by the
            # worker's process group, and Ctrl-C in the terminal reaches only the demo.
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=os.environ.copy(),
            )

    def wait_ready(self, progress: ProgressLog, timeout_s: float) -> bool:
        """Wait until the worker reports ready; False if it exits or takes too long."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(e.kind == "ready" for e in progress.since(0)):
                return True
            if self.process.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def stop(self, timeout_s: float = 15.0) -> None:
        """Warm shutdown (SIGTERM); after ``timeout_s``, kill the worker's process group."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout_s)

    def log_tail(self, lines: int = 20) -> str:
        """The end of the worker's log, to show when something went wrong."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
