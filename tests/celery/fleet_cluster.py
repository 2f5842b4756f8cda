"""The fleet worker cluster the real-worker fleet tests share (``tests/celery/fleetapp.py``)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis as redis_lib

from tests import services
from tests.celery.conftest import _with_db
from tests.celery.workers import BACKEND_DB, BROKER_DB, Cluster

__all__ = ["APP", "RATE", "FleetCluster", "fleet_cluster", "rate_over", "times_of"]

APP = "tests.celery.fleetapp"
RATE = 10.0


class FleetCluster(Cluster):
    """A cluster running ``fleetapp`` with a fleet Redis and a key prefix of its own."""

    fleet_redis: str = ""
    prefix: str = ""

    def env(self) -> dict[str, str]:
        """The cluster's environment plus the fleet settings."""
        return {
            **super().env(),
            "XSM_TEST_FLEET_REDIS": self.fleet_redis,
            "XSM_TEST_FLEET_PREFIX": self.prefix,
            "XSM_TEST_RATE": repr(RATE),
        }

    def start_worker(self, name: str, pool: str = "prefork", processes: int = 1) -> Any:
        """A ``fleetapp`` worker with ``processes`` pool processes."""
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        args = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            APP,
            "worker",
            "-P",
            pool,
            "-c",
            str(processes),
            "-n",
            f"{name}@%h",
            "-Q",
            self.queue,
            "-l",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        proc = subprocess.Popen(args, cwd=self.workdir, env=self.env(), stdout=log, stderr=log)
        self.procs.append(proc)
        self._wait_ready(name, proc)
        return proc


def fleet_cluster(tmp_path: Path) -> Iterator[FleetCluster]:
    """A fleet cluster on the shared Redis (broker, results and fleet state)."""
    services.require("redis")
    group = FleetCluster(
        broker=_with_db(services.REDIS_URL, BROKER_DB),
        backend=_with_db(services.REDIS_URL, BACKEND_DB),
        workdir=tmp_path,
    )
    group.fleet_redis = _with_db(services.REDIS_URL, BACKEND_DB)
    group.prefix = f"xsm-test-fleet-{uuid.uuid4().hex[:8]}:"
    try:
        yield group
    finally:
        group.close()
        if group.fleet_redis.endswith(f"/{BACKEND_DB}"):  # the shared one, not a private one
            client = redis_lib.Redis.from_url(group.fleet_redis)
            keys = list(client.scan_iter(match=f"{group.prefix}*", count=500))
            if keys:
                client.delete(*keys)


def times_of(results: redis_lib.Redis, tag: str) -> list[float]:
    return sorted(float(t) for t in results.lrange(f"xsm-test-fleet:{tag}:times", 0, -1))


def rate_over(times: list[float], start: float, seconds: float) -> float:
    return sum(1 for t in times if start <= t < start + seconds) / seconds
