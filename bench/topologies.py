"""A three-primary Redis Cluster on loopback ports, started for the tests and the benchmarks.

``start_cluster()`` runs ``redis-server --cluster-enabled yes`` three times in a fresh
temporary folder (nothing saved), joins the servers with ``redis-cli --cluster create`` and
waits until every node reports ``cluster_state:ok``; ``RedisClusterNodes.stop()`` ends
exactly those processes and removes the folder. It lives here rather than under ``tests/``
so that ``python -m bench fleet`` can start the same cluster the tests run against; the
tests import it. It needs only the stdlib and Debian's ``redis-server`` and ``redis-cli``.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

__all__ = ["ClusterUnavailableError", "RedisClusterNodes", "start_cluster"]

#: Seconds to wait for the servers to listen and for the cluster to report ``ok``.
START_TIMEOUT_S = 30.0

#: Redis' cluster bus listens on the client port plus this.
_BUS_OFFSET = 10_000


class ClusterUnavailableError(RuntimeError):
    """Raised when redis-server or redis-cli is missing, or a cluster will not form."""


@dataclass
class RedisClusterNodes:
    """The processes and folder of one started cluster; ``url`` addresses it."""

    ports: list[int]
    folder: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The ``redis+cluster://`` URL of the first node (the client finds the others)."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def stop(self) -> None:
        """End the servers this cluster started and delete their folder."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.processes.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_cluster(primaries: int = 3) -> RedisClusterNodes:
    """Start a Redis Cluster of ``primaries`` nodes, no replicas, and wait until it serves.

    Raises:
        ClusterUnavailableError: A binary is missing, or the cluster did not form in
            ``START_TIMEOUT_S`` (the servers are stopped first).
    """
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        raise ClusterUnavailableError("redis-server and redis-cli are needed for a Redis Cluster")
    nodes = RedisClusterNodes(
        _free_ports(primaries), Path(tempfile.mkdtemp(prefix="xsm-redis-cluster-"))
    )
    try:
        for port in nodes.ports:
            nodes.processes.append(_server(server, port, nodes.folder))
        deadline = time.monotonic() + START_TIMEOUT_S
        for port in nodes.ports:
            _wait(partial(_listens, port), deadline, f"redis-server on {port}")
        subprocess.run(
            [
                *(cli, "--cluster", "create"),
                *(f"127.0.0.1:{p}" for p in nodes.ports),
                *("--cluster-replicas", "0", "--cluster-yes"),
            ],
            check=True,
            capture_output=True,
            timeout=START_TIMEOUT_S,
        )
        for port in nodes.ports:
            _wait(partial(_cluster_ok, cli, port), deadline, f"cluster_state:ok on {port}")
    except (OSError, subprocess.SubprocessError, ClusterUnavailableError) as exc:
        nodes.stop()
        raise ClusterUnavailableError(f"the Redis Cluster did not start: {exc}") from exc
    return nodes


def _server(binary: str, port: int, folder: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            *(binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)),
            *("--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf"),
            *("--save", "", "--appendonly", "no", "--daemonize", "no"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _free_ports(count: int) -> list[int]:
    """Ports whose client port and cluster bus port (+10000) are both free on loopback."""
    found: list[int] = []
    while len(found) < count:
        port = random.randint(20_000, 55_000)
        if (
            port not in found
            and not _listens(port)
            and _bindable(port)
            and _bindable(port + _BUS_OFFSET)
        ):
            found.append(port)
    return found


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _cluster_ok(cli: str, port: int) -> bool:
    out = subprocess.run(
        [cli, "-p", str(port), "cluster", "info"],
        check=False,
        capture_output=True,
        text=True,
        timeout=5,
    ).stdout
    return "cluster_state:ok" in out


def _wait(ready: Callable[[], bool], deadline: float, what: str) -> None:
    while not ready():
        if time.monotonic() > deadline:
            raise ClusterUnavailableError(f"timed out waiting for {what}")
        time.sleep(0.05)
