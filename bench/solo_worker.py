"""One home for the benches that drain a queue with a real ``celery worker -P solo``.

A bench module defines its tasks and a ``task_success`` (or similar) handler that writes its
figure to the Redis key named by ``XSM_BENCH_KEY`` when the worker has done its work; then
``drain`` fills a fresh queue, starts the worker on it, waits for that key and returns its
value. The worker runs the bench module itself (``-A bench.<module>``), so what it measures
is exactly what the module defines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import redis
from celery import Celery

__all__ = ["ROOT", "drain"]

ROOT = Path(__file__).resolve().parent.parent


def drain(
    module: str,
    redis_url: str,
    fill: Callable[[Celery, Any, str], None] | None,
    *,
    queue: str | None = None,
    env: Mapping[str, str] | None = None,
    drop_env: tuple[str, ...] = (),
    timeout_s: float = 120.0,
    what: str = "its messages",
) -> bytes:
    """Run ``fill(producer, connection, queue)``, drain the queue with a solo worker, return
    what the worker wrote to ``XSM_BENCH_KEY``.

    ``queue`` names a queue the caller filled already (``fill`` may then be None); by
    default a fresh one is made. Either way it is deleted afterwards.

    Raises:
        RuntimeError: the worker exited or did not write its figure within ``timeout_s``
            (the message carries the end of its log).
    """
    queue = queue or f"bench-{uuid.uuid4().hex[:8]}"
    key = f"bench-result-{uuid.uuid4().hex}"
    producer = Celery("bench_producer", broker=redis_url)
    if fill is not None:
        with producer.connection_for_write() as conn:
            fill(producer, conn, queue)
    worker_env = {**os.environ, **(env or {}), "XSM_BENCH_KEY": key, "PYTHONPATH": str(ROOT)}
    for name in drop_env:
        worker_env.pop(name, None)
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        module,
        "worker",
        "-P",
        "solo",
        "-Q",
        queue,
        "-l",
        "ERROR",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    client = redis.Redis.from_url(redis_url)
    try:
        with tempfile.TemporaryDirectory() as cwd:
            log = Path(cwd) / "worker.log"
            with log.open("wb") as out:
                worker = subprocess.Popen(args, cwd=cwd, env=worker_env, stdout=out, stderr=out)
                try:
                    deadline = time.monotonic() + timeout_s
                    while (value := client.get(key)) is None:
                        if time.monotonic() > deadline or worker.poll() is not None:
                            tail = log.read_text(errors="replace")[-2000:]
                            raise RuntimeError(f"the worker did not finish {what}:\n{tail}")
                        time.sleep(0.05)
                finally:
                    worker.terminate()
                    worker.wait(timeout=30)
        return bytes(value)
    finally:
        client.delete(key, queue)
        producer.close()
