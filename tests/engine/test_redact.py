"""redact() masks secret-looking keys; public_context() hides the library's private keys."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xsm_celery import PRIVATE_CONTEXT_PREFIX, public_context, redact
from xsm_celery.plugins import DEFAULT_REDACT_KEYS, REDACTED, is_private_context_key


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "db_password",
        "apiKey",
        "API_KEY",
        "x-api-key",
        "Authorization",
        "auth",
        "sessionId",
        "card_number",
        "pin",
        "pin_code",
        "refresh-token",
        "clientSecret",
        "SSN",
    ],
)
def test_secret_keys_are_masked(key: str) -> None:
    """Every common spelling of a secret key is masked."""
    assert redact({key: "s3cret", "user": "ann"}) == {key: REDACTED, "user": "ann"}


@pytest.mark.parametrize("key", ["shipping", "spin", "author", "company", "mapping", "topic"])
def test_short_fragments_match_whole_words_only(key: str) -> None:
    """Short fragments (pin, auth, pan, otp) do not mask words that merely contain them."""
    assert redact({key: "visible"}) == {key: "visible"}


def test_redact_walks_nested_values_and_keeps_the_input() -> None:
    """Dicts inside lists and tuples are masked too; the input is not changed."""
    value = {"items": [{"token": "t"}, ({"ok": 1, "secret": 2},)], "n": 3}
    assert redact(value) == {
        "items": [{"token": REDACTED}, ({"ok": 1, "secret": REDACTED},)],
        "n": 3,
    }
    assert value["items"][0] == {"token": "t"}


def test_custom_key_list_replaces_the_default() -> None:
    """A caller's key list is used instead of the default one, with the same spellings."""
    assert redact({"X-Customer-Ref": "c1", "password": "p"}, keys=["customer_ref"]) == {
        "X-Customer-Ref": REDACTED,
        "password": "p",
    }


def test_non_mapping_values_pass_through() -> None:
    """Scalars and strings come back unchanged."""
    assert redact("password") == "password"
    assert redact(5) == 5


def test_public_context_drops_private_keys() -> None:
    """public_context hides _xsm_ keys and keeps the user's."""
    ctx = {"attempt": 2, f"{PRIVATE_CONTEXT_PREFIX}errors": ["e"]}
    assert public_context(ctx) == {"attempt": 2}
    assert PRIVATE_CONTEXT_PREFIX == "_xsm_"
    assert is_private_context_key("_xsm_x")
    assert not is_private_context_key("xsm")


def test_default_keys_are_lowercase_words() -> None:
    """The default list is normalised, so matching is case-insensitive."""
    assert all(k == k.lower() for k in DEFAULT_REDACT_KEYS)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(json_values)
def test_redact_keeps_shape_and_never_leaks(value: Any) -> None:
    """Redaction keeps every key and list length, and no secret-keyed value survives."""
    out = redact(value)

    def check(before: Any, after: Any) -> None:
        if isinstance(before, dict):
            assert list(after) == list(before)
            for key in before:
                if after[key] == REDACTED and before[key] != REDACTED:
                    continue
                check(before[key], after[key])
        elif isinstance(before, list):
            assert len(after) == len(before)
            for b, a in zip(before, after, strict=True):
                check(b, a)
        else:
            assert after == before

    check(value, out)
    assert redact(out) == out
