"""A redis-server of the test's own, on a free port, that a test may stop and restart.

The shared Redis on 6379 serves every engineer's tests at once, so fault tests never touch
it: they start this one instead. By default it keeps an append-only file synced on every
write, so a restart loses nothing that was acknowledged, as a production Redis configured for
a broker; ``PrivateRedis(persistent=False)`` keeps nothing, so a restart comes back empty, as
a broker without persistence does.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services

__all__ = ["PrivateRedis", "free_port", "private_redis", "running_redis"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """One redis-server process this test session owns; ``url(db)`` addresses it.

    Args:
        persistent: Keep an append-only file synced on every write (a restart loses
            nothing), or keep nothing (a restart starts empty).
    """

    def __init__(self, *, persistent: bool = True) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            message = "redis-server is not installed; the fault tests start their own"
            if services.in_ci():
                pytest.fail(message)
            pytest.skip(message)
        self.binary = binary
        self.persistent = persistent
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="xsm-private-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        """The ``redis://`` URL of database ``db`` on this server."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server (no-op if it runs) and wait until it accepts connections."""
        if self.running:
            return
        durability = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.persistent
            else ["--appendonly", "no"]
        )
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                *durability,
                "--save",
                "",
                "--daemonize",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not services.reachable(self.port, timeout=0.2):
            if time.monotonic() > deadline or not self.running:
                raise RuntimeError(f"private redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Kill the server at once, as a crash would (the AOF, if kept, has what was written).

        Returns once the port is closed, so a ``start()`` right after binds it again.
        """
        if self.process is None:
            return
        self.process.kill()
        self.process.wait(timeout=10)
        self.process = None
        deadline = time.monotonic() + 10
        while services.reachable(self.port, timeout=0.2):
            if time.monotonic() > deadline:
                raise RuntimeError(f"private redis-server still listens on port {self.port}")
            time.sleep(0.02)

    def restart(self, down_s: float = 0.0) -> None:
        """Kill the server, stay down ``down_s`` seconds, and start it again."""
        self.stop()
        if down_s:
            time.sleep(down_s)
        self.start()

    def close(self) -> None:
        """Stop the server and delete its files."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def private_redis() -> Iterator[PrivateRedis]:
    """A redis-server of this session's own, which tests may kill and restart."""
    server = PrivateRedis()
    server.start()
    yield server
    server.close()


@pytest.fixture
def running_redis(private_redis: PrivateRedis) -> PrivateRedis:
    """The private Redis, started again if an earlier test left it stopped."""
    private_redis.start()
    return private_redis
