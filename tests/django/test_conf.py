"""The XSM_CELERY settings dict: lazy, validated, with suggestions for typos."""

from __future__ import annotations

import pytest
from django.test import override_settings

from xsm_celery.django.conf import get_settings, import_string
from xsm_celery.errors import ConfigurationError


def test_defaults_work_with_no_setting() -> None:
    """Without XSM_CELERY every value has a default."""
    with override_settings(XSM_CELERY=None):
        conf = get_settings()
    assert conf.database == "default"
    assert conf.relay_batch == 100
    assert conf.relay_lease_s == 30.0


def test_values_are_read_at_call_time() -> None:
    """A changed setting is seen by the next call; nothing is cached at import."""
    with override_settings(XSM_CELERY={"RELAY_BATCH": 7, "REDACT_KEYS": ["voucher"]}):
        conf = get_settings()
    assert conf.relay_batch == 7
    assert conf.redact_keys == ("voucher",)


def test_an_unknown_key_names_the_closest_one() -> None:
    """A typo is refused with the key it probably meant."""
    with (
        override_settings(XSM_CELERY={"RELAY_BACTH": 5}),
        pytest.raises(ConfigurationError, match="did you mean 'RELAY_BATCH'"),
    ):
        get_settings()


@pytest.mark.parametrize(
    ("key", "value"),
    [("RELAY_BATCH", 0), ("TIMERS_BATCH", True), ("RELAY_LEASE_S", -1), ("DATABASE", "nope")],
)
def test_bad_values_are_refused(key: str, value: object) -> None:
    """Non-positive sizes, a bad lease and an unknown database alias are refused by name."""
    with override_settings(XSM_CELERY={key: value}), pytest.raises(ConfigurationError, match=key):
        get_settings()


def test_a_non_dict_setting_is_refused() -> None:
    """XSM_CELERY must be a dict."""
    with (
        override_settings(XSM_CELERY=["DATABASE"]),
        pytest.raises(ConfigurationError, match="dict"),
    ):
        get_settings()


def test_import_string_accepts_both_spellings() -> None:
    """'module:attr' and 'module.attr' both resolve; a missing name is a ConfigurationError."""
    assert import_string("os.path:join") is import_string("os.path.join")
    with pytest.raises(ConfigurationError, match="cannot import"):
        import_string("os.path:nope")


def test_an_unknown_key_with_nothing_close_reads_as_sentences() -> None:
    """With no close key, the refusal ends its sentence before listing the valid keys."""
    with override_settings(XSM_CELERY={"ZZZZZZ": 5}), pytest.raises(ConfigurationError) as caught:
        get_settings()
    assert "unknown XSM_CELERY key 'ZZZZZZ'. Valid names: " in str(caught.value)


@pytest.mark.parametrize("value", [0, "voucher", [3]])
def test_redact_keys_must_be_a_list_of_names(value: object) -> None:
    """``REDACT_KEYS`` of the wrong type is a ConfigurationError naming the key, not a TypeError."""
    with (
        override_settings(XSM_CELERY={"REDACT_KEYS": value}),
        pytest.raises(ConfigurationError, match="REDACT_KEYS"),
    ):
        get_settings()
