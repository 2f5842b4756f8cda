"""No ``xsm_*`` header a producer writes can pass a fleet limit, lose a task or name a secret.

One delivery at a time in the test process, on a memory broker, with the fleet state on the
shared Redis (see ``admission_support``). The same rules on real workers are in
``test_fleet_forgery``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis as redis_lib
from celery import Celery
from celery.exceptions import Ignore

from tests import services
from tests.celery.admission_support import app_factory, closed_port, deliver
from tests.celery.queues import drain_queue
from xsm_celery.celery import Xsm
from xsm_celery.celery.fleet.admission import FLEET_COUNTERS
from xsm_celery.celery.fleet.headers import DEFERRAL_HEADER, RESERVATION_HEADER
from xsm_celery.celery.fleet.limit_names import key_digest, key_label, limit_name
from xsm_celery.celery.fleet.plan import Concurrency, RateLimit
from xsm_celery.errors import ConfigurationError

SECRET = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"


@pytest.fixture
def make_app() -> Iterator[Callable[..., Celery]]:
    """Apps on a memory broker with the fleet on the shared Redis, cleaned up after."""
    yield from app_factory()


def _rated(app: Celery, name: str = "t.rated", **options: Any) -> tuple[Any, list[Any]]:
    """A task limited to one call a minute on the limit ``name``; returns it and its runs."""
    ran: list[Any] = []

    @Xsm(app).task(shared=False, name=name, fleet_rate_limit=RateLimit("1/m", burst=1, **options))
    def rated(n: Any) -> None:
        ran.append(n)

    return rated, ran


def test_a_forged_reservation_header_does_not_pass_the_rate(
    make_app: Callable[..., Celery],
) -> None:
    """A header naming the limit, with no reservation in Redis, is asked for a token anyway."""
    app = make_app()
    rated, ran = _rated(app)
    deliver(rated, 1)
    before = FLEET_COUNTERS[("header_ignored", RESERVATION_HEADER)]
    for n in (2, 3):
        with pytest.raises(Ignore):
            deliver(rated, n, headers={RESERVATION_HEADER: "t.rated"})
    assert ran == [1]
    assert FLEET_COUNTERS[("header_ignored", RESERVATION_HEADER)] == before + 2
    assert len(drain_queue(app)) == 2


def test_a_genuine_reservation_is_used_once(make_app: Callable[..., Celery]) -> None:
    """A deferral's reservation admits its own message once; a second copy asks again."""
    app = make_app(xsm_timer_countdown_max_s=120.0)
    rated, ran = _rated(app)
    deliver(rated, 1)
    task_id = str(uuid.uuid4())
    with pytest.raises(Ignore):
        deliver(rated, 2, task_id=task_id)
    [message] = drain_queue(app)
    headers = dict(message.headers)
    assert headers[RESERVATION_HEADER] == "t.rated"
    deliver(rated, 2, headers=headers, task_id=task_id)  # its own token: no wait
    with pytest.raises(Ignore):
        deliver(rated, 2, headers=headers, task_id=task_id)  # consumed already
    with pytest.raises(Ignore):
        deliver(rated, 3, headers=headers)  # another task id: none held for it
    assert ran == [1, 2]


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"first": "abc"}),
        json.dumps({"first": 1e300, "count": 1}),
        json.dumps({"first": 0.0, "count": 10**9}),
        json.dumps({"first": 0.0, "count": -5}),
        json.dumps(["first", 0]),
        "not json",
        json.dumps({"first": None}),
    ],
)
def test_a_junk_deferral_header_is_ignored_not_fatal(
    make_app: Callable[..., Celery], raw: str
) -> None:
    """The task runs when admitted, and is deferred (never lost) when it is not."""
    app = make_app()
    rated, ran = _rated(app)
    deliver(rated, 1, headers={DEFERRAL_HEADER: raw})
    with pytest.raises(Ignore):
        deliver(rated, 2, headers={DEFERRAL_HEADER: raw})
    assert ran == [1]
    [message] = drain_queue(app)
    history = json.loads(message.headers[DEFERRAL_HEADER])
    assert history["count"] == 1
    assert abs(history["first"] - redis_lib.Redis.from_url(services.REDIS_URL).time()[0]) < 5


def test_a_header_claiming_an_old_first_deferral_cannot_dead_letter_the_task(
    make_app: Callable[..., Celery],
) -> None:
    """Only Redis' record of the first deferral decides that a task waited too long."""
    app = make_app(xsm_fleet_max_deferral_s=60)
    rated, ran = _rated(app)
    deliver(rated, 1)
    old = json.dumps({"first": 0.0, "count": 41, "reason": "rate_limited"})
    with pytest.raises(Ignore):
        deliver(rated, 2, headers={DEFERRAL_HEADER: old})
    assert ran == [1]
    assert len(drain_queue(app)) == 1


def test_with_redis_down_a_header_is_carried_but_never_dead_letters(
    make_app: Callable[..., Celery],
) -> None:
    """A closed limit with Redis down defers; an old header's history does not end the task."""
    app = make_app(
        xsm_redis_url=f"redis://127.0.0.1:{closed_port()}/0", xsm_fleet_max_deferral_s=60
    )

    @Xsm(app).task(shared=False, name="t.closed", fleet_concurrency=Concurrency(2))
    def closed() -> None:
        raise AssertionError("never admitted while Redis is down")

    old = json.dumps({"first": 1.0, "count": 7, "reason": "redis_down"})
    for headers in ({DEFERRAL_HEADER: old}, {DEFERRAL_HEADER: '{"first": "abc"}'}):
        with pytest.raises(Ignore):
            deliver(closed, headers=headers)
    first, second = drain_queue(app)
    assert json.loads(first.headers[DEFERRAL_HEADER])["count"] == 8
    assert json.loads(second.headers[DEFERRAL_HEADER])["count"] == 1


def test_a_keyed_limit_shows_a_digest_of_the_key_everywhere(
    make_app: Callable[..., Celery], caplog: pytest.LogCaptureFixture
) -> None:
    """A key taken from an API-key argument is never in a Redis key, a log line or a fact."""
    app = make_app()
    rated, _ = _rated(app, name="t.per_key", key=lambda api_key: api_key)
    with caplog.at_level(logging.DEBUG):
        deliver(rated, SECRET)
        with pytest.raises(Ignore):
            deliver(rated, SECRET)
    [message] = drain_queue(app)
    client = redis_lib.Redis.from_url(services.REDIS_URL)
    keys = [k.decode() for k in client.scan_iter(match=f"{app.conf.xsm_fleet_prefix}*")]
    index = [m.decode() for m in client.zrange(f"{app.conf.xsm_fleet_prefix}index", 0, -1)]
    name = f"t.per_key[#{key_digest(SECRET)}]"
    assert message.headers[RESERVATION_HEADER] == name
    assert any(name in k for k in keys)
    ours = {k: v for k, v in message.headers.items() if k.startswith("xsm_")}
    assert SECRET not in caplog.text + " ".join(keys + index) + json.dumps(ours)
    assert name in caplog.text


def test_display_shows_a_safe_value_and_still_hides_a_secret() -> None:
    """display=True shows a short plain value; a secret shape or a bracket gets the digest."""
    assert limit_name("t", "customer-42", display=True) == "t[customer-42]"
    assert limit_name("t", "customer-42") == f"t[#{key_digest('customer-42')}]"
    assert key_label(SECRET, display=True) == f"#{key_digest(SECRET)}"
    assert key_label("a]b", display=True).startswith("#")
    assert key_label("x" * 65, display=True).startswith("#")
    assert key_digest(42) == key_digest("42")
    with pytest.raises(ConfigurationError, match="display"):
        RateLimit("1/s", display="yes")  # type: ignore[arg-type]
