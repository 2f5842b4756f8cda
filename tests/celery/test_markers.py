"""Attempt markers: where they go, and how a redelivery is classified with them."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery

from xsm_celery.celery.task.execute import _lost_attempt
from xsm_celery.celery.task.header import ChartHeader
from xsm_celery.celery.task.markers import (
    BackendAttemptMarkers,
    MemoryAttemptMarkers,
    open_attempt_markers,
)
from xsm_celery.errors import ConfigurationError, WorkerLost
from xsm_celery.redis.markers import RedisAttemptMarkers
from xsm_celery.sqlalchemy.timers import SQLAlchemyAttemptMarkers

ROOT = Path(__file__).resolve().parents[2]


def app_with(**conf: Any) -> Celery:
    """A fresh app with ``conf``."""
    app = Celery("markers", set_as_current=False)
    app.conf.update(conf)
    return app


def test_a_redis_broker_keeps_markers_in_redis(redis_url: str) -> None:
    """With a Redis broker the markers are expiring Redis keys, read back as ints."""
    markers = open_attempt_markers(app_with(broker_url=redis_url), None, None, 60)
    assert isinstance(markers, RedisAttemptMarkers)
    task_id = uuid.uuid4().hex
    assert markers.started(task_id) is None
    markers.mark(task_id, 2)
    assert markers.started(task_id) == 2


def test_rabbitmq_with_a_redis_backend_uses_the_backends_redis(redis_url: str) -> None:
    """An AMQP broker with a Redis result backend puts the markers in that very Redis."""
    import redis

    app = app_with(broker_url="amqp://guest@127.0.0.1//", result_backend=redis_url)
    markers = open_attempt_markers(app, None, None, 60)
    task_id = uuid.uuid4().hex
    markers.mark(task_id, 3)
    markers.flush()  # type: ignore[attr-defined]
    backend = redis.Redis.from_url(redis_url)
    try:
        assert backend.get(f"xsm:attempt:{task_id}") == b"3"
        assert 0 < backend.ttl(f"xsm:attempt:{task_id}") <= 60
    finally:
        backend.delete(f"xsm:attempt:{task_id}")
        backend.close()


def test_a_key_value_backend_is_used_through_celery(tmp_path: Path) -> None:
    """Another key-value result backend (here Celery's cache backend) keeps the markers."""
    app = app_with(broker_url="amqp://guest@127.0.0.1//", result_backend="cache+memory://")
    markers = open_attempt_markers(app, None, None, 60)
    assert isinstance(markers, BackendAttemptMarkers)
    markers.mark("t1", 4)
    assert markers.started("t1") == 4


def test_otherwise_the_timer_database_keeps_them(tmp_path: Path) -> None:
    """No Redis and no key-value backend: the markers go to the timer store's database."""
    url = f"sqlite:///{tmp_path / 'timers.db'}"
    app = app_with(broker_url="amqp://guest@127.0.0.1//")
    markers = open_attempt_markers(app, None, url, 60)
    assert isinstance(markers, SQLAlchemyAttemptMarkers)
    markers.mark("t1", 1)
    assert markers.started("t1") == 1


def test_a_configured_object_or_url_wins(tmp_path: Path) -> None:
    """xsm_attempt_markers may name an object or a URL; an object without mark() is refused."""
    memory = MemoryAttemptMarkers()
    app = app_with(broker_url="amqp://guest@127.0.0.1//")
    assert open_attempt_markers(app, memory, None, 60) is memory
    assert isinstance(open_attempt_markers(app, "memory://", None, 60), MemoryAttemptMarkers)
    with pytest.raises(ConfigurationError, match="no mark"):
        open_attempt_markers(app, object(), None, 60)


def test_no_place_at_all_is_a_configuration_error() -> None:
    """Without Redis, a key-value backend or a timer URL there is nowhere to write markers."""
    app = app_with(broker_url="amqp://guest@127.0.0.1//")
    with pytest.raises(ConfigurationError, match="xsm_attempt_markers"):
        open_attempt_markers(app, None, object(), 60)


def fake_task(task_id: str) -> Any:
    """The two attributes _lost_attempt reads from a task."""
    return SimpleNamespace(name="shop.charge", request=SimpleNamespace(id=task_id))


#: What the checked header of a message carrying attempt 1's failure says.
SNAPSHOT_AFTER_ONE_FAILURE = ChartHeader(
    snapshot={"context": {"attempt": 1}}, attempt=1, same_structure=True
)


def test_a_redelivery_whose_attempt_started_is_a_lost_attempt() -> None:
    """Marker 2 on a message carrying attempt 1's failure: attempt 2 ran and its worker died."""
    markers = MemoryAttemptMarkers()
    markers.mark("t", 2)
    lost = _lost_attempt(fake_task("t"), markers, SNAPSHOT_AFTER_ONE_FAILURE)
    assert isinstance(lost, WorkerLost)
    assert "attempt 2 of shop.charge[t]" in str(lost)


def test_a_redelivery_that_never_started_is_not_counted() -> None:
    """A prefetched or countdown-held message handed back by a restarting worker runs normally."""
    markers = MemoryAttemptMarkers()
    assert _lost_attempt(fake_task("t"), markers, None) is None
    markers.mark("t", 1)
    assert _lost_attempt(fake_task("t"), markers, SNAPSHOT_AFTER_ONE_FAILURE) is None


def test_the_first_attempt_lost_is_detected_without_a_snapshot() -> None:
    """Attempt 1 has no snapshot yet; its marker alone shows it started."""
    markers = MemoryAttemptMarkers()
    markers.mark("t", 1)
    assert isinstance(_lost_attempt(fake_task("t"), markers, None), WorkerLost)


def test_redis_markers_are_sent_without_waiting_and_read_back(redis_url: str) -> None:
    """mark() returns before Redis answers; another connection still sees every marker."""
    writer = RedisAttemptMarkers(redis_url, 60)
    reader = RedisAttemptMarkers(redis_url, 60)
    ids = [uuid.uuid4().hex for _ in range(3)]
    for n, task_id in enumerate(ids, start=1):
        writer.mark(task_id, n)
    writer.flush()
    assert [reader.started(task_id) for task_id in ids] == [1, 2, 3]


@pytest.mark.timeout(30)
def test_a_marker_survives_a_sigkill_right_after_mark(redis_url: str) -> None:
    """A process killed the instant mark() returns still leaves its marker in Redis."""
    task_id = uuid.uuid4().hex
    code = (
        "import os, signal\n"
        "from xsm_celery.redis.markers import RedisAttemptMarkers\n"
        f"m = RedisAttemptMarkers({redis_url!r}, 60)\n"
        f"m.mark('warm-up', 1)\n"
        f"m.mark({task_id!r}, 7)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=20, check=False)
    assert done.returncode == -signal.SIGKILL
    assert RedisAttemptMarkers(redis_url, 60).started(task_id) == 7


@pytest.mark.timeout(30)
def test_a_held_marker_survives_a_sigkill_after_replies_came_back(redis_url: str) -> None:
    """Replies left unread would make the kernel reset the socket and drop a held marker."""
    task_id = uuid.uuid4().hex
    code = (
        "import os, signal, time\n"
        "from xsm_celery.redis.markers import RedisAttemptMarkers\n"
        f"m = RedisAttemptMarkers({redis_url!r}, 60)\n"
        "m.mark('warm-up', 1)\n"
        "time.sleep(0.5)  # past the kernel's 200 ms cork ceiling: the reply comes back\n"
        f"m.mark({task_id!r}, 7)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=20, check=False)
    assert done.returncode == -signal.SIGKILL
    assert RedisAttemptMarkers(redis_url, 60).started(task_id) == 7


def test_markers_go_on_after_redis_drops_their_connection(redis_url: str) -> None:
    """Redis closing the marker connection costs at most the markers in flight, then the
    markers reconnect on a new socket and are stored again."""
    import redis as redis_lib

    writer = RedisAttemptMarkers(redis_url, 60)
    writer.mark(uuid.uuid4().hex, 1)
    writer.flush()
    local = writer._local.line.held.getsockname()
    admin = redis_lib.Redis.from_url(redis_url)
    assert admin.client_kill(f"{local[0]}:{local[1]}")
    ids = [uuid.uuid4().hex for _ in range(40)]
    for task_id in ids:
        writer.mark(task_id, 3)
    writer.flush()
    assert writer._local.line.held.getsockname() != local
    stored = [RedisAttemptMarkers(redis_url, 60).started(task_id) for task_id in ids]
    assert stored[-35:] == [3] * 35


def test_an_error_reply_to_a_marker_is_logged_and_the_line_goes_on(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Replies are read off the socket in bunches; each error among them is logged, and the
    connection stays in step (a read after them gets its own reply)."""
    import redis as redis_lib

    admin = redis_lib.Redis.from_url(redis_url)
    user = f"xsm-no-set-{uuid.uuid4().hex[:8]}"
    admin.acl_setuser(user, enabled=True, nopass=True, keys=["*"], commands=["+@all", "-set"])
    try:
        markers = RedisAttemptMarkers(redis_url.replace("redis://", f"redis://{user}@"), 60)
        task_id = uuid.uuid4().hex
        admin.set(f"xsm:attempt:{task_id}", 4)
        with caplog.at_level("WARNING", logger="xsm_celery.redis.markers"):
            for n in range(5):
                markers.mark(uuid.uuid4().hex, n + 1)
            assert markers.started(task_id) == 4
        refused = [r for r in caplog.records if "NOPERM" in r.getMessage()]
        assert len(refused) == 5
    finally:
        admin.acl_deluser(user)


def test_an_unreadable_marker_runs_the_redelivery_as_a_new_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """If the marker store cannot be read, the redelivered message runs (with a warning)."""

    class Down(MemoryAttemptMarkers):
        def started(self, task_id: str) -> int | None:
            raise OSError("connection refused")

    with caplog.at_level("WARNING", logger="xsm_celery.celery.task.execute"):
        assert _lost_attempt(fake_task("t"), Down(), None) is None
    assert "could not read the attempt marker" in caplog.text
