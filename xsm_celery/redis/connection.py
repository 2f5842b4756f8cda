"""``redis_client(url)``: the one way every Redis the package opens is named and opened.

The URL spellings, the same ones kombu accepts for a Celery broker, so one setting can
serve the broker and the fleet:

* ``redis://[[user]:password@]host[:port][/db][?option=value...]``
* ``rediss://...``: TLS. The certificate options are redis-py's, as query parameters or
  keyword arguments: ``ssl_cert_reqs`` (``required``, ``optional``, ``none``; Celery's
  ``CERT_REQUIRED`` spelling is accepted too), ``ssl_ca_certs``, ``ssl_certfile``,
  ``ssl_keyfile``, ``ssl_check_hostname``.
* ``unix:///path/to/redis.sock[?db=0]``
* ``sentinel://[[user]:password@]host1:26379;sentinel://host2:26379[/db][?master_name=mymaster]``:
  Redis behind Sentinel, one ``sentinel://`` address per sentinel joined by ``;`` (kombu's
  spelling). The service name is ``?master_name=`` in the URL or the ``master_name``
  argument (Celery's ``broker_transport_options={'master_name': ...}``). The password is
  the Redis password; ``?sentinel_password=`` is the sentinels' own. ``?ssl=true`` (with
  the ``ssl_*`` options) talks TLS to the primary.
* ``redis+cluster://host:port`` (``rediss+cluster://`` for TLS): a Redis Cluster client
  (``redis.cluster.RedisCluster``), which serves the same commands.

A Sentinel client is ``Sentinel(...).master_for(service)``: each new connection asks the
sentinels where the primary is, and a connection to a demoted primary is dropped, so a
failover is followed without rebuilding the client.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
from redis.connection import URL_QUERY_ARGUMENT_PARSERS
from redis.sentinel import Sentinel

from xsm_celery.errors import ConfigurationError

__all__ = ["DEFAULT_SENTINEL_PORT", "SCHEMES", "redis_client"]

#: The URL schemes ``redis_client`` opens.
SCHEMES = ("redis", "rediss", "unix", "sentinel", "redis+cluster", "rediss+cluster")

#: The port of a ``sentinel://`` address that gives none.
DEFAULT_SENTINEL_PORT = 26379

_EXAMPLES = (
    "redis://host:6379/0, rediss://host:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/ca.pem, "
    "unix:///run/redis.sock, or sentinel://h1:26379;sentinel://h2:26379/0?master_name=mymaster"
)

#: Celery's and the ``ssl`` module's names for ``ssl_cert_reqs``, in redis-py's spelling.
_CERT_REQS = {
    "cert_required": "required",
    "cert_optional": "optional",
    "cert_none": "none",
    "required": "required",
    "optional": "optional",
    "none": "none",
}


def redis_client(
    url: str,
    *,
    socket_timeout: float | None = None,
    master_name: str | None = None,
    **options: Any,
) -> redis.Redis[bytes]:
    """A redis-py client for ``url``, whatever the topology behind it.

    Args:
        url: One of the spellings in this module's docstring.
        socket_timeout: Seconds a socket read or connect may take (None: no limit); it
            also bounds the calls to the sentinels.
        master_name: The Sentinel service name when the URL gives none (Celery's
            ``broker_transport_options['master_name']``).
        options: More ``redis.Redis`` options (``health_check_interval``, ``ssl_ca_certs``,
            ...); they win over the URL's query parameters.

    Raises:
        ConfigurationError: The URL is not one of the spellings, or a Sentinel URL has no
            service name; the message says what to write.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"a Redis URL must be a string such as {_EXAMPLES}; got {url!r}")
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if socket_timeout is not None:
        options.setdefault("socket_timeout", socket_timeout)
        options.setdefault("socket_connect_timeout", socket_timeout)
    if scheme == "sentinel":
        return _sentinel_client(url, master_name, options)
    if scheme in ("redis+cluster", "rediss+cluster"):
        from redis.cluster import RedisCluster

        plain = url.split("+cluster", 1)[0] + url.split("+cluster", 1)[1]
        options.pop("health_check_interval", None)
        _normalise_cert_reqs(options)
        # RedisCluster offers the commands the stores send; the cluster code owns the rest.
        return cast("redis.Redis[bytes]", RedisCluster.from_url(plain, **options))
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigurationError(f"{url!r} is not a Redis URL; write {_EXAMPLES}")
    try:
        kwargs: dict[str, Any] = redis.connection.parse_url(url)
    except ValueError as exc:
        raise ConfigurationError(
            f"{url!r} is not a usable Redis URL ({exc}); write {_EXAMPLES}"
        ) from exc
    # Unlike ``from_url``, the arguments win over the URL's query, and Celery's spellings
    # of ``ssl_cert_reqs`` are read.
    kwargs.update(options)
    _normalise_cert_reqs(kwargs)
    client: redis.Redis[bytes] = redis.Redis(connection_pool=redis.ConnectionPool(**kwargs))
    client.auto_close_connection_pool = True  # type: ignore[attr-defined]
    return client


def _normalise_cert_reqs(options: dict[str, Any]) -> None:
    """Accept ``ssl_cert_reqs=CERT_REQUIRED`` (Celery's spelling) as redis-py's ``required``."""
    value = options.get("ssl_cert_reqs")
    if isinstance(value, str):
        found = _CERT_REQS.get(value.lower())
        if found is None:
            raise ConfigurationError(
                f"ssl_cert_reqs={value!r} must be one of 'required', 'optional', 'none' "
                "(or CERT_REQUIRED, CERT_OPTIONAL, CERT_NONE)"
            )
        options["ssl_cert_reqs"] = found


def _sentinel_client(
    url: str, master_name: str | None, options: dict[str, Any]
) -> redis.Redis[bytes]:
    """``Sentinel(addresses).master_for(service)`` for a ``sentinel://`` URL."""
    addresses: list[tuple[str, int]] = []
    conn: dict[str, Any] = {}
    for raw in url.split(";"):
        part = raw.strip()
        if not part.lower().startswith("sentinel://"):
            raise ConfigurationError(
                f"{url!r}: every address of a Sentinel URL starts with sentinel://, joined "
                f"by ';'; got {part!r}. Write sentinel://h1:26379;sentinel://h2:26379/0"
                "?master_name=mymaster"
            )
        addresses.append(_sentinel_part(url, part, conn))
    service = conn.pop("master_name", None) or master_name
    if not service:
        raise ConfigurationError(
            f"{url!r} names no Sentinel service; add ?master_name=mymaster to the URL (or "
            "set broker_transport_options={'master_name': 'mymaster'} when it is the broker's)"
        )
    sentinel_kwargs = {k: v for k, v in options.items() if k.startswith("socket_")}
    sentinel_password = conn.pop("sentinel_password", None)
    if sentinel_password:
        sentinel_kwargs["password"] = sentinel_password
    ssl = str(conn.pop("ssl", "")).lower() in ("1", "true", "yes")
    conn.update(options)
    _normalise_cert_reqs(conn)
    if ssl:
        conn["ssl"] = True
    sentinel = Sentinel(addresses, sentinel_kwargs=sentinel_kwargs, **conn)
    client: redis.Redis[bytes] = sentinel.master_for(service)
    return client


def _sentinel_part(url: str, part: str, conn: dict[str, Any]) -> tuple[str, int]:
    """One sentinel's address; its credentials, database and query go into ``conn``."""
    parsed = urlsplit(part)
    try:
        port = parsed.port or DEFAULT_SENTINEL_PORT
    except ValueError as exc:
        raise ConfigurationError(f"{url!r}: bad sentinel port in {part!r} ({exc})") from exc
    if not parsed.hostname:
        raise ConfigurationError(f"{url!r}: {part!r} names no sentinel host; write host:26379")
    found: dict[str, Any] = {}
    if parsed.username:
        found["username"] = unquote(parsed.username)
    if parsed.password:
        found["password"] = unquote(parsed.password)
    db = parsed.path.strip("/")
    if db:
        if not db.isdigit():
            raise ConfigurationError(f"{url!r}: the database must be a number, got {db!r}")
        found["db"] = int(db)
    for name, value in parse_qsl(parsed.query):
        parser = URL_QUERY_ARGUMENT_PARSERS.get(name)
        try:
            found[name] = parser(value) if parser else value
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{url!r}: bad value for {name}: {value!r}") from exc
    for name, value in found.items():
        if conn.setdefault(name, value) != value:
            raise ConfigurationError(
                f"{url!r} gives {name} twice with different values; give it once"
            )
    return parsed.hostname, port
