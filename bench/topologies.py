"""Real Redis topologies on loopback ports, started for the tests and the benchmarks.

A three-primary Redis Cluster, a Sentinel group (a primary, a replica and three sentinels)
and a Redis that speaks only TLS. They live here rather than under ``tests/`` so that
``python -m bench fleet`` measures on the same servers the tests run against; the tests
import them and turn ``TopologyUnavailableError`` into a skip (or a failure under CI).
Each needs only the stdlib, redis-py and Debian's ``redis-server`` and ``redis-cli``
(7.0 or later: TLS and ``--sentinel``), plus ``openssl`` for TLS.

``start_cluster()`` runs ``redis-server --cluster-enabled yes`` three times in a fresh
temporary folder (nothing saved), joins the servers with ``redis-cli --cluster create`` and
waits until every node reports ``cluster_state:ok``; ``RedisClusterNodes.stop()`` ends
exactly those processes and removes the folder.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import quote

import redis

__all__ = [
    "SERVICE",
    "RedisClusterNodes",
    "SentinelGroup",
    "TlsRedis",
    "TopologyUnavailableError",
    "free_port",
    "start_cluster",
]

#: The Sentinel service name the group monitors.
SERVICE = "mymaster"

#: Seconds a server may take to answer its first PING.
_READY_S = 10.0

#: Seconds to wait for the servers to listen and for the cluster to report ``ok``.
START_TIMEOUT_S = 30.0

#: Redis' cluster bus listens on the client port plus this.
_BUS_OFFSET = 10_000


class TopologyUnavailableError(RuntimeError):
    """Raised when a binary is missing, or a cluster, group or server will not start."""


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
        TopologyUnavailableError: A binary is missing, or the cluster did not form in
            ``START_TIMEOUT_S`` (the servers are stopped first).
    """
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        raise TopologyUnavailableError("redis-server and redis-cli are needed for a Redis Cluster")
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
    except (OSError, subprocess.SubprocessError, TopologyUnavailableError) as exc:
        nodes.stop()
        raise TopologyUnavailableError(f"the Redis Cluster did not start: {exc}") from exc
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
            raise TopologyUnavailableError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _binary(name: str) -> str:
    """The path of ``name``, or ``TopologyUnavailableError`` when it is not installed."""
    found = shutil.which(name) or (
        f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None
    )
    if found is None:
        raise TopologyUnavailableError(f"{name} is not installed; .ci/run installs it")
    return found


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ping(client: redis.Redis, what: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _READY_S
    while True:
        try:
            if client.ping():
                return
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise TopologyUnavailableError(f"{what} did not start (exit code {proc.poll()})")
        time.sleep(0.05)


@dataclass
class _Processes:
    """Started ``redis-server`` processes, each with its log, stopped together."""

    workdir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen(
            [_binary("redis-server"), *args], cwd=self.workdir, stdout=log, stderr=log
        )
        self.procs[name] = proc
        return proc

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class SentinelGroup:
    """One primary, one replica and three sentinels monitoring them as ``SERVICE``."""

    workdir: Path
    ports: dict[str, int] = field(default_factory=dict)
    processes: _Processes | None = None

    @property
    def url(self) -> str:
        """The group's URL in the package's spelling (kombu's, plus ``master_name``)."""
        hosts = ";".join(f"sentinel://127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"{hosts}/0?master_name={SERVICE}"

    @property
    def sentinel_ports(self) -> list[int]:
        """The three sentinels' ports."""
        return [self.ports[f"sentinel{i}"] for i in range(3)]

    def start(self) -> None:
        """Start every process and wait until the sentinels know the replica and each other."""
        self.processes = _Processes(self.workdir)
        self.ports = {name: free_port() for name in ("primary", "replica")}
        base = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        primary = self.ports["primary"]
        self._server("primary", [*base, "--port", str(primary)])
        self._server(
            "replica",
            [*base, "--port", str(self.ports["replica"]), "--replicaof", "127.0.0.1", str(primary)],
        )
        for i in range(3):
            port = self.ports[f"sentinel{i}"] = free_port()
            conf = self.workdir / f"sentinel{i}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.workdir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 5000\n"
            )
            proc = self.processes.start(f"sentinel{i}", [str(conf), "--sentinel"])
            _wait_ping(self.sentinel(i), f"sentinel{i}", proc)
        self._wait_settled()

    def _server(self, name: str, args: list[str]) -> None:
        assert self.processes is not None
        proc = self.processes.start(name, args)
        _wait_ping(self.node(name), name, proc)

    def node(self, name: str) -> redis.Redis:
        """A plain client of the primary or the replica (by its first role)."""
        return redis.Redis(host="127.0.0.1", port=self.ports[name], socket_timeout=2)

    def sentinel(self, i: int) -> redis.Redis:
        """A plain client of sentinel ``i``."""
        return redis.Redis(host="127.0.0.1", port=self.ports[f"sentinel{i}"], socket_timeout=2)

    def primary_port(self, i: int = 0) -> int:
        """The primary's port as sentinel ``i`` reports it."""
        _, port = self.sentinel(i).execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(port)

    def _wait_settled(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready = all(
                len(self.sentinel(i).execute_command("SENTINEL", "SENTINELS", SERVICE)) == 2
                and len(self.sentinel(i).execute_command("SENTINEL", "REPLICAS", SERVICE)) == 1
                for i in range(3)
            )
            linked = self.node("replica").info("replication").get("master_link_status") == "up"
            if ready and linked:
                return
            time.sleep(0.2)
        raise TopologyUnavailableError(
            f"the Sentinel group did not settle; logs are in {self.workdir}"
        )

    def kill_primary(self) -> None:
        """SIGKILL the current primary's process (no shutdown, no last save)."""
        assert self.processes is not None
        port = self.primary_port()
        name = next(n for n in ("primary", "replica") if self.ports[n] == port)
        os.kill(self.processes.procs[name].pid, signal.SIGKILL)
        self.processes.procs[name].wait()

    def wait_promoted(self, old_port: int, timeout_s: float = 30.0) -> int:
        """Wait until every sentinel names a primary other than ``old_port``; return its port."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ports = {self.primary_port(i) for i in range(3)}
            if len(ports) == 1 and old_port not in ports:
                new = ports.pop()
                role = redis.Redis(host="127.0.0.1", port=new, socket_timeout=2).info(
                    "replication"
                )["role"]
                if role == "master":
                    return new
            time.sleep(0.1)
        raise TopologyUnavailableError(
            f"no failover within {timeout_s} s; logs are in {self.workdir}"
        )

    def stop(self) -> None:
        """Stop every process of the group."""
        if self.processes is not None:
            self.processes.stop()


@dataclass
class TlsRedis:
    """A Redis that speaks only TLS, with a self-signed certificate for 127.0.0.1."""

    workdir: Path
    port: int = 0
    processes: _Processes | None = None

    @property
    def ca(self) -> Path:
        """The certificate, which is its own CA."""
        return self.workdir / "redis.crt"

    @property
    def url(self) -> str:
        """A ``rediss://`` URL that verifies the server against ``ca``."""
        ca = quote(str(self.ca))
        return f"rediss://127.0.0.1:{self.port}/0?ssl_cert_reqs=required&ssl_ca_certs={ca}"

    def start(self) -> None:
        """Generate the certificate and start the server on a free TLS port."""
        key = self.workdir / "redis.key"
        subprocess.run(
            [
                _binary("openssl"),
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                str(key),
                "-out",
                str(self.ca),
            ],
            check=True,
            capture_output=True,
        )
        self.processes = _Processes(self.workdir)
        self.port = free_port()
        proc = self.processes.start(
            "tls",
            [
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-cert-file",
                str(self.ca),
                "--tls-key-file",
                str(key),
                "--tls-ca-cert-file",
                str(self.ca),
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
        )
        client = redis.Redis(
            host="127.0.0.1", port=self.port, ssl=True, ssl_ca_certs=str(self.ca), socket_timeout=2
        )
        _wait_ping(client, "the TLS Redis", proc)

    def stop(self) -> None:
        """Stop the server."""
        if self.processes is not None:
            self.processes.stop()
