"""Attempt markers in Redis, written without waiting for Redis to answer, nor waking it.

Every attempt of every chart task writes a marker, so its cost is on every task's path. A
Redis round trip is most of that cost, and the task does not need the answer before it runs:
it needs the command to be on its way. So ``mark()`` only sends ``SET`` on a connection of its
own, and the replies are read in bunches of :data:`DRAIN_EVERY` (or by ``flush()``, or before a
``started()`` read), by which time they have long arrived; an error reply is logged then.

On a TCP connection the ``SET`` is sent with ``MSG_MORE``: the kernel holds it instead of
pushing it to Redis at once, and pushes it with the last ``SET`` of a bunch, before any read
(``flush``, ``started``, a drain), or by itself within 200 ms (Linux's cork ceiling). Waking
Redis costs the worker more than the send: on a busy machine Redis takes the CPU from the
worker at each wake-up, so one wake-up per bunch instead of one per attempt is most of what a
marker costs there. A marker is read only for a redelivered message, long after that.

This is safe against the crash the marker exists for. Once ``send`` returns, the command is in
the kernel: when the process dies, the kernel closes the socket and sends what it holds before
the FIN (and if Redis's reply had already come back, the ``SET`` had already run). That holds
only while no reply waits unread (a socket closed with unread data is reset and what it held
is dropped), so before a marker is held, replies that came back unread are drained first. Only
the death of the whole host in the moments after ``send``, or the cork ceiling sending the
held markers in the microseconds between that check and the next send, can lose a marker, and
that costs one uncounted attempt, not a loop.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
from typing import Any

import redis

from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence.markers import MARKER_KEY_PREFIX
from xsm_celery.redis.connection import redis_client

__all__ = ["DRAIN_EVERY", "MARKER_KEY_PREFIX", "RedisAttemptMarkers"]

logger = logging.getLogger(__name__)

#: Markers sent before their replies are read: one ``recv`` then collects them all, so the
#: common path costs one ``send`` per attempt. Replies are a few bytes; they wait in the socket.
DRAIN_EVERY = 32

#: Bytes one ``recv`` of marker replies asks for: a bunch of ``+OK`` lines is 160.
_READ_SIZE = 65536

#: Hold a send in the kernel for a while (Linux); 0 where the platform has no such flag.
_MSG_MORE: int = getattr(socket, "MSG_MORE", 0)


class _Line:
    """One thread's marker connection, and what ``mark()`` needs of its socket, kept.

    ``mark()`` is on every attempt's path, where the worker's other work has just pushed it
    out of the CPU's caches, so each attribute walk and object built there counts: the socket
    checks and the poll object are made once per socket, not once per marker.
    """

    __slots__ = ("conn", "held", "pending", "poller", "sock", "tail")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.pending = 0
        #: The start of a reply whose end has not been read yet.
        self.tail = b""
        self.sock: object = None
        self.held: socket.socket | None = None
        self.poller: Any = None

    def refresh(self) -> socket.socket | None:
        """The socket a send may be held on, re-read when redis-py has replaced its socket."""
        # redis-py keeps its socket in ``_sock`` (None while disconnected).
        sock = getattr(self.conn, "_sock", None)
        if sock is not self.sock:
            self.sock = sock
            self.held = _held_socket(sock)
            self.poller = None
            if self.held is not None:
                self.poller = select.poll()
                self.poller.register(self.held, select.POLLIN)
        return self.held

    def has_unread(self) -> bool:
        """Whether replies wait unread in the kernel (held markers the cork ceiling sent).

        A socket closed with unread data is reset, not shut down: Linux then drops what it
        still holds instead of sending it. So a marker is held only while nothing is unread,
        which a drain before holding the next one restores. A zero-timeout poll, not a
        non-blocking recv: redis-py gives its sockets a timeout, and Python waits that long
        for data before any recv on such a socket. A hang-up or an error also reads as
        unread: the drain then reports it and reconnects.
        """
        return self.poller is not None and bool(self.poller.poll(0))


class RedisAttemptMarkers:
    """Markers as expiring Redis keys, one dedicated connection per thread.

    Args:
        url: The Redis URL, any spelling of ``redis_client`` (``redis://``, ``rediss://``,
            ``unix://``, ``sentinel://``).
        ttl_s: Seconds a marker lives; it only has to outlive a redelivery.
    """

    def __init__(self, url: str, ttl_s: float) -> None:
        if url.split("://", 1)[0].lower().endswith("+cluster"):
            # A cluster client has no one pool to take a connection from: each node has its own.
            raise ConfigurationError(
                f"attempt markers need one Redis server or a Sentinel group, not {url!r}; give "
                "a redis://, rediss://, unix:// or sentinel:// URL, or a database URL"
            )
        self._url = url
        self._ttl = max(1, int(ttl_s))
        ttl = str(self._ttl).encode()
        self._ttl_field = b"$2\r\nEX\r\n$%d\r\n%s\r\n" % (len(ttl), ttl)
        self._local = threading.local()

    @classmethod
    def from_url(cls, url: str, ttl_s: float) -> RedisAttemptMarkers:
        """Markers in the Redis at ``url``."""
        return cls(url, ttl_s)

    def mark(self, task_id: str, attempt: int) -> None:
        """Send ``SET xsm:attempt:<id> <attempt> EX <ttl>``; its reply is read later.

        The command is packed here rather than by redis-py's generic packer: it is the one
        write on every attempt's path, and its shape never changes.
        """
        line = getattr(self._local, "line", None) or self._line()
        held = line.refresh()
        if line.pending >= DRAIN_EVERY or (line.pending and line.has_unread()):
            self._drain(line)
            held = line.refresh()
        command = _pack_set(MARKER_KEY_PREFIX + task_id, attempt, self._ttl_field)
        # The last marker of a bunch pushes the bunch, so its replies are there to drain.
        try:
            if held is not None and line.pending < DRAIN_EVERY - 1:
                held.sendall(command, _MSG_MORE)
            else:
                if line.sock is None:
                    # connect(), not send's implicit reconnect: a Sentinel connection asks
                    # for the current primary only there.
                    line.conn.connect()
                line.conn.send_packed_command([command], check_health=False)
        except OSError:
            line.conn.disconnect()
            line.pending, line.tail = 0, b""  # the old connection's replies will never come
            line.conn.connect()
            line.conn.send_packed_command([command], check_health=False)
        line.pending += 1

    def flush(self) -> None:
        """Push the markers held so far and read their replies; an error reply is logged."""
        line = getattr(self._local, "line", None)
        if line is not None:
            self._drain(line)

    def started(self, task_id: str) -> int | None:
        """The recorded attempt, if the key has not expired.

        A connection that broke since the last call (a Redis restart, a Sentinel failover)
        is reconnected once: only a Redis still down makes the read fail. Reconnecting goes
        through ``connect()``, where a Sentinel connection asks for the current primary;
        redis-py's implicit reconnect in ``send_command`` would dial the old address.
        """
        line = getattr(self._local, "line", None) or self._line()
        self._drain(line)
        try:
            line.refresh()
            if line.sock is None:
                line.conn.connect()
            line.conn.send_command("GET", MARKER_KEY_PREFIX + task_id)
            value = line.conn.read_response()
        except (redis.ConnectionError, redis.ReadOnlyError):
            line.conn.disconnect()
            line.conn.connect()
            line.conn.send_command("GET", MARKER_KEY_PREFIX + task_id)
            value = line.conn.read_response()
        return None if value is None else int(value)

    def _line(self) -> _Line:
        pool = _marker_pool(self._url)
        # types-redis predates the no-argument form that redis-py 5.3+ asks for.
        line = self._local.line = _Line(pool.get_connection())  # type: ignore[call-arg]
        self._local.pool = pool
        return line

    def _drain(self, line: _Line) -> None:
        """Read the replies of the markers sent so far, straight off the socket.

        Each reply to ``SET`` is one line (``+OK`` or an error), so counting line ends counts
        replies, and one ``recv`` usually holds a whole bunch; redis-py's reply parser would
        cost a call chain per reply. Nothing else is read on this connection while markers
        are pending (``started()`` drains first), so redis-py's own buffer stays empty.
        """
        if not line.pending:
            return
        _push(line.refresh())
        sock: Any = line.sock
        try:
            while line.pending > 0:
                data = b"" if sock is None else sock.recv(_READ_SIZE)
                if not data:
                    logger.warning(
                        "the marker connection closed; %d markers in flight were not confirmed",
                        line.pending,
                    )
                    line.conn.disconnect()
                    break
                *replies, line.tail = (line.tail + data).split(b"\r\n")
                line.pending -= len(replies)
                for reply in replies:
                    if not reply.startswith(b"+"):
                        logger.warning(
                            "an attempt marker was not stored: Redis replied %r", reply[:200]
                        )
        except OSError:
            logger.warning("attempt markers in flight were not confirmed", exc_info=True)
            line.conn.disconnect()
        line.pending = 0
        line.tail = b""


def _marker_pool(url: str) -> redis.ConnectionPool:
    """The connection pool a thread's marker connection comes from.

    A plain ``redis://`` URL gets a bare pool (the connection is all the markers use); any
    other spelling goes through ``redis_client``, so a ``sentinel://`` connection asks the
    sentinels for the primary each time it connects and a ``rediss://`` one talks TLS.
    """
    if url.lower().startswith("redis://"):
        return redis.ConnectionPool.from_url(url)
    pool: redis.ConnectionPool = redis_client(url).connection_pool
    return pool


def _held_socket(sock: object) -> socket.socket | None:
    """``sock`` if sends on it may be held (plain TCP, MSG_MORE known), else None."""
    # TLS and Unix sockets are written the usual way.
    if not _MSG_MORE or type(sock) is not socket.socket:
        return None
    return sock if sock.family in (socket.AF_INET, socket.AF_INET6) else None


def _push(sock: socket.socket | None) -> None:
    """Make the kernel send what it holds now (setting ``TCP_NODELAY`` pushes pending data)."""
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            return  # a broken socket: reading the replies reports it


def _pack_set(key: str, attempt: int, ttl_field: bytes) -> bytes:
    """``SET key attempt EX ttl`` in the Redis protocol (RESP), as one buffer."""
    raw_key = key.encode("utf-8")
    value = b"%d" % attempt
    return b"*5\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n%s" % (
        len(raw_key),
        raw_key,
        len(value),
        value,
        ttl_field,
    )
