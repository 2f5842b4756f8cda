"""A PgBouncer in transaction pooling mode in front of the local PostgreSQL, for the tests.

``start_pgbouncer`` writes a config into a fresh temporary folder and runs Debian's
``pgbouncer`` in the foreground on a free loopback port; ``PgBouncer.stop`` ends that one
process and removes the folder. The pool is two server connections per database and user, so
clients really take turns on the same server sessions: session state left by one transaction
(a prepared statement, a session lock, a ``SET``) shows up in another client's transaction,
which is what breaks a store that is not transaction-pooling safe.

Every database name goes through (``* = ...``), so a test database created on PostgreSQL is
reachable through the pooler under the same name. PgBouncer 1.18 refuses the ``options``
startup parameter, so the per-test schemas other fixtures select with ``-csearch_path``
cannot be used through it: ``PgBouncer.clean_database`` gives each test the ``public``
schema of a database of the pooler's own instead, emptied afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from tests import services

__all__ = [
    "NO_PREPARE",
    "PgBouncer",
    "pooled_url",
    "start_pgbouncer",
    "start_pgbouncer_with_database",
]

#: Server connections per (database, user) pair; small so clients share them.
POOL_SIZE = 2

#: The URL query that turns psycopg's server-side prepared statements off (see connect.py).
NO_PREPARE = "prepare_threshold=none"

#: Seconds to wait for the pooler to accept connections.
START_TIMEOUT_S = 10.0

_CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = {auth_file}
max_client_conn = 200
default_pool_size = {pool_size}
reserve_pool_size = 0
server_reset_query =
pidfile =
"""


@dataclass
class PgBouncer:
    """A running PgBouncer: its port, its folder, and the process to stop."""

    port: int
    folder: Path
    process: subprocess.Popen[bytes]
    #: The database the tests use through the pooler, created directly on PostgreSQL.
    database: str = ""

    def url(self, database: str) -> str:
        """A ``postgresql://`` URL for ``database`` through the pooler."""
        return pooled_url(services.POSTGRES_URL, self.port, database)

    @contextmanager
    def clean_database(self) -> Iterator[str]:
        """The URL of ``database`` through the pooler; its tables are dropped afterwards."""
        try:
            yield f"{self.url(self.database)}?{NO_PREPARE}"
        finally:
            with _direct(self.database) as conn:
                conn.execute("SET lock_timeout = '10s'")
                conn.execute("DROP SCHEMA public CASCADE")
                conn.execute("CREATE SCHEMA public")

    def log(self) -> str:
        """What the pooler logged so far (for failure messages)."""
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop the process this object started, drop its database, remove its folder."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.database:
            with _direct("postgres") as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


@contextmanager
def _direct(database: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection straight to PostgreSQL (not through the pooler)."""
    url = urlsplit(services.POSTGRES_URL)
    conninfo = f"{url.scheme}://{url.netloc}/{database}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        yield conn


def pooled_url(url: str, port: int, database: str) -> str:
    """``url`` with its host and port replaced by the pooler's and its database by ``database``."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    return f"{parts.scheme}://{user}@127.0.0.1:{port}/{database}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_pgbouncer() -> PgBouncer:
    """Start a transaction-pooling PgBouncer in ``folder``; return once it accepts connections.

    Raises:
        RuntimeError: ``pgbouncer`` is not installed or did not start (its log is attached).
    """
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.access(binary, os.X_OK):
        raise RuntimeError("pgbouncer is not installed; apt-get install pgbouncer (.ci/run does)")
    server = urlsplit(services.POSTGRES_URL)
    user = server.username or "postgres"
    folder = Path(tempfile.mkdtemp(prefix="xsm-pgbouncer-"))
    auth_file = folder / "userlist.txt"
    auth_file.write_text(f'"{user}" ""\n')
    port = _free_port()
    config = folder / "pgbouncer.ini"
    config.write_text(
        _CONFIG.format(
            host=server.hostname or "127.0.0.1",
            port=server.port or 5432,
            listen_port=port,
            auth_file=auth_file,
            pool_size=POOL_SIZE,
        )
    )
    command = [binary, str(config)]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; -u drops to an unprivileged user, who must
        # still read the auth file on a reload.
        os.chmod(folder, 0o755)
        os.chmod(auth_file, 0o644)
        command[1:1] = ["-u", "nobody"]
    with (folder / "pgbouncer.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    bouncer = PgBouncer(port=port, folder=folder, process=process)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = bouncer.log()
            bouncer.stop()
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {log}")
        if services.reachable(port, timeout=0.2):
            return bouncer
        time.sleep(0.05)
    log = bouncer.log()
    bouncer.stop()
    raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{port}: {log}")


def start_pgbouncer_with_database() -> PgBouncer:
    """``start_pgbouncer`` plus a fresh database of its own, dropped by ``stop``."""
    bouncer = start_pgbouncer()
    name = f"xsm_pgbouncer_{os.getpid()}"
    try:
        with _direct("postgres") as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    except BaseException:
        bouncer.stop()
        raise
    bouncer.database = name
    return bouncer
