"""The xsm_* settings: defaults, validation, unknown keys, read once per app."""

from __future__ import annotations

import math
from typing import ClassVar

import pytest
from celery import Celery

from xsm_celery.celery.settings import (
    DEFAULT_COUNTDOWN_MAX_S,
    DEFAULT_STORE_URL,
    XsmSettings,
    read_settings,
    register_keys,
)
from xsm_celery.errors import ConfigurationError


def app_with(**conf: object) -> Celery:
    """A fresh app with ``conf`` applied."""
    app = Celery("settings-test", set_as_current=False)
    app.conf.update(conf)
    return app


def test_defaults_work_with_no_settings() -> None:
    """An app without xsm_ keys gets the SQLite default store and a 300 s countdown limit."""
    settings = read_settings(app_with())
    assert settings == XsmSettings()
    assert settings.dead_letter_store == DEFAULT_STORE_URL
    assert settings.timer_store == DEFAULT_STORE_URL
    assert settings.timer_countdown_max_s == DEFAULT_COUNTDOWN_MAX_S == 300.0


def test_values_are_read_and_converted() -> None:
    """Numbers given as strings are parsed; store objects are kept as they are."""
    from xsm_celery.patterns import DeadLetterStore

    store = DeadLetterStore()
    settings = read_settings(
        app_with(
            xsm_dead_letter_store=store,
            xsm_timer_countdown_max_s="60",
            xsm_timer_batch=50.0,
            xsm_redact_keys=["iban"],
        )
    )
    assert settings.dead_letter_store is store
    assert settings.timer_countdown_max_s == 60.0
    assert settings.timer_batch == 50
    assert settings.redact_keys == ("iban",)


def test_an_unknown_key_is_refused_with_the_closest_name() -> None:
    """A typo is not silently ignored: the error names the setting it probably meant."""
    with pytest.raises(ConfigurationError, match="did you mean 'xsm_dead_letter_store'"):
        read_settings(app_with(xsm_dead_leter_store="sqlite:///x.db"))


def test_upper_case_keys_are_matched_too() -> None:
    """Django-style upper-case names (after the CELERY_ namespace) are the same settings."""
    settings = read_settings(app_with(XSM_TIMER_COUNTDOWN_MAX_S=5))
    assert settings.timer_countdown_max_s == 5.0


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "soon", True])
def test_bad_numbers_are_refused(bad: object) -> None:
    """A limit that is not a finite positive number is refused with the default named."""
    with pytest.raises(ConfigurationError, match="xsm_timer_countdown_max_s"):
        read_settings(app_with(xsm_timer_countdown_max_s=bad))


def test_redact_keys_must_be_a_list_of_names() -> None:
    """A single string (a common slip) is refused rather than split into letters."""
    with pytest.raises(ConfigurationError, match="list of key names"):
        read_settings(app_with(xsm_redact_keys="iban"))


def test_registered_keys_are_accepted() -> None:
    """Keys registered by another module of the package are not reported as unknown."""
    register_keys("xsm_test_only_setting")
    assert read_settings(app_with(xsm_test_only_setting=1)) == XsmSettings()
    with pytest.raises(ValueError, match="must start with 'xsm_'"):
        register_keys("timeout")


def test_the_outbox_relay_keys_are_known_without_importing_it_first() -> None:
    """Setting xsm_relay_batch before anything imports the relay is not an error."""
    assert read_settings(app_with(xsm_relay_batch=10)) == XsmSettings()


def test_settings_are_read_once_per_app() -> None:
    """Changing app.conf after the first read does not change the record (no per-run parsing)."""
    app = app_with(xsm_timer_countdown_max_s=10)
    first = read_settings(app)
    app.conf.xsm_timer_countdown_max_s = 99
    assert read_settings(app) is first


def test_a_django_namespace_reads_only_prefixed_upper_case_keys() -> None:
    """Under namespace="CELERY", CELERY_XSM_* keys count and other Django settings do not."""

    class DjangoSettings:
        XSM_CELERY: ClassVar[dict[str, str]] = {"DATABASE": "default"}  # the app's own dict
        CELERY_XSM_DEAD_LETTER_STORE = "memory://namespaced"
        CELERY_XSM_TIMER_COUNTDOWN_MAX_S = 60

    app = Celery("namespace-test", set_as_current=False)
    app.config_from_object(DjangoSettings, namespace="CELERY")
    settings = read_settings(app)
    assert settings.dead_letter_store == "memory://namespaced"
    assert settings.timer_countdown_max_s == 60.0


def test_a_misspelt_namespaced_key_is_still_refused() -> None:
    """CELERY_XSM_ keys are checked like plain xsm_ keys, so a typo is not silently ignored."""

    class DjangoSettings:
        CELERY_XSM_DEAD_LETTER_STOR = "memory://typo"

    app = Celery("namespace-typo", set_as_current=False)
    app.config_from_object(DjangoSettings, namespace="CELERY")
    with pytest.raises(ConfigurationError, match="xsm_dead_letter_store"):
        read_settings(app)
