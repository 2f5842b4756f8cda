"""A PostgreSQL cluster and a Redis server of the fault tests' own, which a test may take down.

The shared services on 5432 and 6379 serve everyone's tests, so a fault test never stops
them: it starts these instead, each on a free loopback port that stays the same across a
``stop()`` / ``start()``, so the workers' URLs keep working once the service is back.

* ``PrivatePostgres``: ``initdb`` into a temporary directory owned by ``postgres`` (initdb
  refuses root), trust authentication, ``fsync=off`` for speed; ``stop()`` is
  ``pg_ctl stop -m immediate`` (a crash: no shutdown checkpoint, connections cut at once).
* ``volatile_redis``: ``tests.kombu.private_redis.PrivateRedis(persistent=False)``, so
  ``restart()`` loses every key, as a broker without persistence does when it restarts.

A missing binary skips the tests locally and fails them under ``CI=true``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services
from tests.kombu.private_redis import PrivateRedis, free_port

__all__ = ["PrivatePostgres", "PrivateRedis", "private_postgres", "volatile_redis"]


def _missing(message: str) -> None:
    if services.in_ci():
        pytest.fail(message)
    pytest.skip(message)


def _wait_port(port: int, up: bool, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while services.reachable(port, timeout=0.2) != up:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not {'start' if up else 'stop'} on port {port}")
        time.sleep(0.05)


def _pg_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` with initdb, else the PATH's."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PrivatePostgres:
    """One PostgreSQL cluster this module owns, on its own port; ``url`` addresses it."""

    def __init__(self) -> None:
        bindir = _pg_bindir()
        if bindir is None or not (bindir / "pg_ctl").exists():
            _missing("PostgreSQL binaries (initdb, pg_ctl) are not installed")
        assert bindir is not None
        self.bindir = bindir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="xsm-private-pg-"))
        self.data = self.dir / "data"
        self.logfile = self.dir / "postgres.log"
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                _missing("running as root and there is no 'postgres' user to run initdb as")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        )

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the ``postgres`` database (psycopg 3)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def running(self) -> bool:
        """Whether the server accepts TCP connections."""
        return services.reachable(self.port, timeout=0.2)

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self._as_postgres, *args], check=False, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")

    def start(self) -> None:
        """Start the server on its port (no-op if it runs) and wait until it accepts clients."""
        if self.running:
            return
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.logfile),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        _wait_port(self.port, True, 30, "private PostgreSQL")

    def stop(self) -> None:
        """Stop at once, as a crash would (``-m immediate``); clients see their connection die."""
        if not (self.data / "postmaster.pid").exists():
            return
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"
        )
        _wait_port(self.port, False, 30, "private PostgreSQL")

    def close(self) -> None:
        """Stop the server and delete the cluster."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL cluster of this module's own, stopped and deleted afterwards."""
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def volatile_redis() -> Iterator[PrivateRedis]:
    """A Redis without persistence of this module's own: a restart comes back empty."""
    server = PrivateRedis(persistent=False)
    try:
        server.start()
        yield server
    finally:
        server.close()
