"""Error-chain entries: four strings, cut at 1,000 characters, secrets masked."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xsm_celery.patterns import error_entry
from xsm_celery.patterns.error_chain import MAX_ERROR_MESSAGE, mask_secrets, truncate_message


def test_entry_shape() -> None:
    """An entry names the source, the failing name, the class and the message."""
    assert error_entry("service", "charge", TimeoutError("slow")) == {
        "source": "service",
        "name": "charge",
        "type": "TimeoutError",
        "message": "slow",
    }


@given(st.text(max_size=3_000))
def test_messages_never_exceed_the_cap(message: str) -> None:
    """Any message is cut to at most 1,000 characters; short ones are kept as they are."""
    cut = truncate_message(message)
    assert len(cut) <= MAX_ERROR_MESSAGE
    if len(message) <= MAX_ERROR_MESSAGE:
        assert cut == message
    else:
        assert cut.endswith("\u2026")
        assert message.startswith(cut[:-1])


def test_nested_secret_values_are_masked() -> None:
    """A secret under a nested key or a list is masked wherever the message quotes it."""
    ctx = {
        "customer": {"card_number": "4111111111111111"},
        "tokens": ["tok_live_abcdef"],
        "order": "o-42",
    }
    message = "charge o-42 with 4111111111111111 failed; refreshed tok_live_abcdef"
    masked = error_entry("service", "charge", RuntimeError(message), context=ctx)["message"]
    assert masked == "charge o-42 with *** failed; refreshed ***"


def test_short_secrets_are_not_searched_for() -> None:
    """Secret values under four characters are not replaced (they would mask innocent text)."""
    assert mask_secrets("pin 123 wrong", {"pin": "123"}) == "pin 123 wrong"


def test_custom_redact_keys() -> None:
    """redact_keys replaces the denylist used to find secret values."""
    ctx = {"customer_name": "Ada Lovelace", "token": "visible-token"}
    entry = error_entry(
        "action",
        "notify",
        ValueError("Ada Lovelace / visible-token"),
        context=ctx,
        redact_keys=("customer",),
    )
    assert entry["message"] == "*** / visible-token"


def test_masking_happens_before_the_cut() -> None:
    """A secret near the 1,000-character boundary is masked, not half-kept."""
    secret = "s3cr3t-value-that-is-long"
    message = "x" * (MAX_ERROR_MESSAGE - 10) + secret
    entry = error_entry("service", "w", RuntimeError(message), context={"secret": secret})
    assert "s3cr3t" not in entry["message"]
