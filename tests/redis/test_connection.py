"""``redis_client``: every Redis URL spelling, read without connecting anywhere."""

from __future__ import annotations

import pytest
import redis
from celery import Celery
from redis.sentinel import SentinelConnectionPool

from xsm_celery.celery.fleet.plan import fleet_settings
from xsm_celery.celery.settings import broker_redis_url
from xsm_celery.errors import ConfigurationError
from xsm_celery.redis.connection import redis_client
from xsm_celery.redis.markers import RedisAttemptMarkers

SENTINELS = "sentinel://h1:26379;sentinel://:pw@h2:26380;sentinel://h3"


def test_a_sentinel_url_names_every_sentinel_and_the_service() -> None:
    """kombu's ';'-joined addresses, the database and ?master_name= make one master_for client."""
    client = redis_client(f"{SENTINELS}/2?master_name=mymaster", socket_timeout=0.5)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "mymaster"
    manager = pool.sentinel_manager
    hosts = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in manager.sentinels
    ]
    assert hosts == [("h1", 26379), ("h2", 26380), ("h3", 26379)]
    assert pool.connection_kwargs["db"] == 2
    assert pool.connection_kwargs["password"] == "pw"
    assert pool.connection_kwargs["socket_timeout"] == 0.5


def test_the_service_name_may_come_from_the_broker_transport_options() -> None:
    """Without ?master_name= the argument names the service; with neither, the error says how."""
    client = redis_client(SENTINELS, master_name="cache")
    assert client.connection_pool.service_name == "cache"
    with pytest.raises(ConfigurationError, match=r"\?master_name=mymaster"):
        redis_client(SENTINELS)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://h:6379", "sentinel://h1:26379;sentinel://h2:26379"),
        ("redis://h:6379;redis://h2:6379", "not a usable Redis URL"),
        ("sentinel://h1;redis://h2?master_name=m", "every address of a Sentinel URL"),
        ("sentinel://h1/0;sentinel://h2/1?master_name=m", "gives db twice"),
        ("rediss://h:6380/0?ssl_cert_reqs=maybe", "ssl_cert_reqs='maybe'"),
    ],
)
def test_a_bad_url_says_what_to_write(url: str, says: str) -> None:
    """Each malformed URL is a ConfigurationError that names the fix."""
    with pytest.raises(ConfigurationError, match=says.replace("?", r"\?")):
        redis_client(url)


def test_tls_options_are_read_in_celerys_spelling_and_arguments_win() -> None:
    """ssl_cert_reqs=CERT_REQUIRED (Celery's broker spelling) is redis-py's 'required'."""
    client = redis_client(
        "rediss://h:6380/0?ssl_cert_reqs=CERT_REQUIRED&ssl_ca_certs=/ca.pem&socket_timeout=9",
        socket_timeout=0.5,
    )
    kwargs = client.connection_pool.connection_kwargs
    assert client.connection_pool.connection_class is redis.SSLConnection
    assert kwargs["ssl_cert_reqs"] == "required"
    assert kwargs["ssl_ca_certs"] == "/ca.pem"
    assert kwargs["socket_timeout"] == 0.5


def test_a_unix_socket_url_opens_a_unix_connection() -> None:
    """unix:///path is redis-py's Unix-socket connection."""
    pool = redis_client("unix:///run/redis.sock?db=3").connection_pool
    assert pool.connection_class is redis.UnixDomainSocketConnection
    assert pool.connection_kwargs["path"] == "/run/redis.sock"
    assert pool.connection_kwargs["db"] == 3


def test_the_fleet_follows_a_sentinel_broker_with_its_service_name() -> None:
    """A sentinel:// broker and broker_transport_options['master_name'] give the fleet's URL."""
    assert broker_redis_url("amqp://h//", {}) is None
    assert broker_redis_url(SENTINELS, {"master_name": "m"}) == f"{SENTINELS}?master_name=m"
    assert broker_redis_url(f"{SENTINELS}/0?db=0", {"master_name": "m"}).endswith("&master_name=m")
    app = Celery("sentinel-broker", set_as_current=False)
    app.conf.update(broker_url=SENTINELS, broker_transport_options={"master_name": "m"})
    url = fleet_settings(app).redis_url
    assert url == f"{SENTINELS}?master_name=m"
    assert redis_client(url).connection_pool.service_name == "m"


def test_attempt_markers_refuse_a_cluster_url_at_once() -> None:
    """Markers need one connection per thread, which a cluster cannot give: refused up front."""
    with pytest.raises(ConfigurationError, match="sentinel:// URL, or a database URL"):
        RedisAttemptMarkers("redis+cluster://127.0.0.1:7000", 60)
