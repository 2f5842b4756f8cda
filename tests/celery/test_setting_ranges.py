"""Every xsm_* setting has a type and a range, checked when read, so a worker refuses to start."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from celery import Celery

from xsm_celery.celery import Xsm
from xsm_celery.celery.settings import read_settings
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns import DeadLetterStore


def app_with(**conf: object) -> Celery:
    """A fresh app with ``conf`` applied."""
    app = Celery("ranges-test", set_as_current=False)
    app.conf.update(conf)
    return app


BAD_VALUES = [
    ("xsm_timer_batch", 0.5, "whole number from 1"),
    ("xsm_timer_batch", 0, "whole number from 1"),
    ("xsm_timer_batch", 10**9, "whole number from 1 to 100000"),
    ("xsm_timer_batch", True, "not a bool"),
    ("xsm_marker_ttl_s", 1e30, "at most"),
    ("xsm_marker_ttl_s", "soon", "must be a number"),
    ("xsm_timer_countdown_max_s", float("nan"), "finite number of seconds"),
    ("xsm_timer_countdown_max_s", -1, "greater than 0"),
    ("xsm_redact_keys", 0, "must be a list of key names"),
    ("xsm_redact_keys", "iban", "must be a list of key names"),
    ("xsm_redact_keys", [1, 2], "must be a list of key names"),
    ("xsm_dead_letter_store", "mongodb://db/x", "schemes: memory, sqlite"),
    ("xsm_dead_letter_store", "dead_letters.db", "is not a store URL"),
    ("xsm_dead_letter_store", 42, "has no put()"),
    ("xsm_timer_store", "memory://", "schemes: sqlite"),
    ("xsm_timer_store", object(), "has no schedule, claim, delete()"),
    ("xsm_attempt_markers", "memcache://x", "schemes: redis"),
    ("xsm_attempt_markers", 3, "has no mark, started()"),
    ("xsm_relay_batch", 0, "whole number"),
    ("xsm_relay_lease_s", 0, "greater than 0"),
    ("xsm_relay_max_batches", 2.5, "whole number"),
    ("xsm_event_partitions", 0, "whole number"),
    ("xsm_relay_owner", "", "non-empty string"),
    ("xsm_relay_broker_url", 5, "non-empty string"),
    ("xsm_outbox_store", "ftp://x", "schemes: sqlite"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_VALUES)
def test_a_bad_value_is_refused_when_read(key: str, value: object, message: str) -> None:
    """Each setting refuses a value of the wrong type or out of range, naming the key."""
    with pytest.raises(ConfigurationError, match=key) as caught:
        read_settings(app_with(**{key: value}))
    assert message in str(caught.value)


GOOD_VALUES = [
    ("xsm_timer_batch", "50", 50),
    ("xsm_timer_batch", 50.0, 50),
    ("xsm_marker_ttl_s", 600, 600.0),
    ("xsm_timer_countdown_max_s", "60", 60.0),
    ("xsm_redact_keys", ("iban",), ("iban",)),
    ("xsm_dead_letter_store", "postgresql+psycopg://u@db/x", "postgresql+psycopg://u@db/x"),
    ("xsm_dead_letter_store", "django", "django"),
    ("xsm_dead_letter_store", "django://replica", "django://replica"),
    ("xsm_timer_store", "sqlite:////tmp/t.db", "sqlite:////tmp/t.db"),
    ("xsm_attempt_markers", "rediss://cache:6380/2", "rediss://cache:6380/2"),
]


@pytest.mark.parametrize(("key", "value", "parsed"), GOOD_VALUES)
def test_a_good_value_is_parsed(key: str, value: object, parsed: object) -> None:
    """Values of the right type and range are kept, numbers parsed from strings."""
    settings = read_settings(app_with(**{key: value}))
    assert getattr(settings, key[len("xsm_") :]) == parsed


def test_registered_keys_accept_good_values() -> None:
    """The relay's keys pass with values of the right type."""
    read_settings(
        app_with(
            xsm_relay_batch=10,
            xsm_relay_lease_s=5.5,
            xsm_event_partitions=4,
            xsm_outbox_store="django",
            xsm_relay_owner="w1",
        )
    )


def test_memory_markers_are_refused_outside_eager_mode() -> None:
    """``memory://`` attempt markers would be lost with a killed child: refused unless eager."""
    with pytest.raises(ConfigurationError, match="task_always_eager"):
        read_settings(app_with(xsm_attempt_markers="memory://"))
    eager = read_settings(app_with(xsm_attempt_markers="memory://", task_always_eager=True))
    assert eager.attempt_markers == "memory://"


def test_a_countdown_above_the_visibility_timeout_is_refused() -> None:
    """On Redis, a countdown at or past the visibility timeout would run the retry twice."""
    with pytest.raises(ConfigurationError, match="visibility timeout \\(3600 s\\)"):
        read_settings(app_with(broker_url="redis://x", xsm_timer_countdown_max_s=4000))
    with pytest.raises(ConfigurationError, match="visibility timeout \\(100 s\\)"):
        read_settings(
            app_with(
                broker_url="redis://x",
                xsm_timer_countdown_max_s=200,
                broker_transport_options={"visibility_timeout": 100},
            )
        )
    raised = app_with(
        broker_url="redis://x",
        xsm_timer_countdown_max_s=4000,
        broker_transport_options={"visibility_timeout": 7200},
    )
    assert read_settings(raised).timer_countdown_max_s == 4000.0
    amqp = app_with(broker_url="amqp://guest@localhost//", xsm_timer_countdown_max_s=4000)
    assert read_settings(amqp).timer_countdown_max_s == 4000.0


def test_an_unknown_key_with_nothing_close_reads_as_sentences() -> None:
    """With no close name the message ends its first sentence before listing the valid ones."""
    with pytest.raises(ConfigurationError) as caught:
        read_settings(app_with(xsm_zzzzzzzz=1))
    assert "unknown Celery setting 'xsm_zzzzzzzz'. Valid names: " in str(caught.value)


def test_a_store_object_is_kept() -> None:
    """A store object with the right methods is used as it is."""
    store = DeadLetterStore()
    assert read_settings(app_with(xsm_dead_letter_store=store)).dead_letter_store is store


def test_beat_entries_expire_when_the_next_tick_is_due() -> None:
    """Each Beat entry carries ``expires`` equal to its interval, so missed ticks do not pile up."""
    entries = Xsm(app_with()).beat_schedule(relay_every=5, timers_every=10)
    assert entries["xsm-fire-timers"]["options"] == {"expires": 10.0}
    assert entries["xsm-relay-outbox"]["options"] == {"expires": 5.0}


def test_a_worker_with_a_bad_setting_refuses_to_start(tmp_path: Path) -> None:
    """``celery worker`` exits with the setting named when a chart task's app has a bad value."""
    (tmp_path / "badproj.py").write_text(
        textwrap.dedent("""
        from celery import Celery
        from xsm_celery.celery import Xsm
        app = Celery("badproj", broker="memory://", backend="cache+memory://")
        app.conf.xsm_timer_batch = 0.5
        xsm = Xsm(app)

        @xsm.task(name="badproj.work")
        def work():
            return 1
    """)
    )
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "badproj", "worker", "--pool=solo", "-Q", "none"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "xsm_timer_batch=0.5" in result.stderr + result.stdout
