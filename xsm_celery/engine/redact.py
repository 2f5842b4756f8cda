"""Keep secrets and library-private keys out of logs, dead letters and public views.

``redact()`` masks values under secret-looking keys; ``public_context()`` drops the keys the
library keeps for itself (``_xsm_`` prefix, such as the dead-letter error chain).

Masking by key is not enough once a value has been copied into free text: ``raise
ValueError(f"bad key {api_key}")`` puts the key into an error message. ``secret_values()``
collects the values a redaction would mask, and ``mask_text()`` replaces them, and every
well-known token shape (``TOKEN_PATTERNS``), wherever they appear in a message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "DEFAULT_REDACT_KEYS",
    "PRIVATE_CONTEXT_PREFIX",
    "REDACTED",
    "MIN_SECRET_LENGTH",
    "TOKEN_PATTERNS",
    "is_private_context_key",
    "mask_text",
    "public_context",
    "redact",
    "secret_values",
]

#: Context keys starting with this prefix belong to the library, not to the user.
PRIVATE_CONTEXT_PREFIX = "_xsm_"

#: The value that replaces a redacted one.
REDACTED = "***"

#: Key fragments treated as secret. Fragments of four letters or fewer must match a whole
#: word of the key (``pin`` masks ``pin_code`` but not ``shipping``); longer ones match
#: anywhere in it (``password`` masks ``db_password_hash``).
DEFAULT_REDACT_KEYS: tuple[str, ...] = (
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "authorization",
    "auth",
    "bearer",
    "credential",
    "cookie",
    "session",
    "signature",
    "otp",
    "pin",
    "card",
    "cvv",
    "cvc",
    "pan",
    "iban",
    "account_number",
    "routing",
    "swift",
    "mnemonic",
    "seed",
    "ssn",
    "dob",
    "date_of_birth",
    "email",
    "phone",
    "passport",
)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s\-.]+")


def _normalise(key: str) -> str:
    """``X-Api-Key``, ``apiKey`` and ``API_KEY`` all become ``x_api_key`` / ``api_key``."""
    return _SEPARATORS.sub("_", _CAMEL.sub("_", key)).lower()


class _Matcher:
    """Compiled form of a key list, so a large context is checked quickly."""

    def __init__(self, keys: Iterable[str]) -> None:
        norm = [_normalise(k) for k in keys]
        self.words = frozenset(k for k in norm if len(k) <= 4)
        self.fragments = tuple(k for k in norm if len(k) > 4)
        self.cache: dict[str, bool] = {}

    def secret(self, key: object) -> bool:
        text = str(key)
        hit = self.cache.get(text)
        if hit is None:
            norm = _normalise(text)
            hit = any(f in norm for f in self.fragments) or any(
                w in self.words for w in norm.split("_")
            )
            if len(self.cache) < 4096:
                self.cache[text] = hit
        return hit


_DEFAULT_MATCHER = _Matcher(DEFAULT_REDACT_KEYS)


def redact(value: Any, keys: Iterable[str] = DEFAULT_REDACT_KEYS) -> Any:
    """A copy of ``value`` with every secret-looking key's value replaced by ``"***"``.

    Walks nested dicts, lists and tuples; other values are returned as they are. The input is
    never changed. Pass ``keys`` to use another list (it replaces the default).
    """
    matcher = _DEFAULT_MATCHER if keys is DEFAULT_REDACT_KEYS else _Matcher(keys)
    return _walk(value, matcher)


def _walk(value: Any, matcher: _Matcher) -> Any:
    if isinstance(value, Mapping):
        return {k: REDACTED if matcher.secret(k) else _walk(v, matcher) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, matcher) for v in value]
    if isinstance(value, tuple):
        return tuple(_walk(v, matcher) for v in value)
    return value


def is_private_context_key(key: object) -> bool:
    """Whether a context key is reserved for the library (``_xsm_`` prefix)."""
    return isinstance(key, str) and key.startswith(PRIVATE_CONTEXT_PREFIX)


def public_context(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """The context without the library's private keys: what user-facing views should show."""
    return {k: v for k, v in ctx.items() if not is_private_context_key(k)}


#: Shorter values are not searched for in text: masking every "1" or "ok" would garble it.
MIN_SECRET_LENGTH = 4

#: Credentials recognisable by their shape alone, masked in any message.
TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\b(?:sk|pk|rk|tok|whsec)_(?:live|test)_[A-Za-z0-9]{8,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
    re.compile(r"(?i)\b(?:password|passwd|pwd|secret|token|api_?key)=[^\s&;,'\"]{4,}"),
)


def secret_values(value: Any, keys: Iterable[str] = DEFAULT_REDACT_KEYS) -> set[str]:
    """Every string (or number) that ``redact(value, keys)`` would mask, at any depth."""
    matcher = _DEFAULT_MATCHER if keys is DEFAULT_REDACT_KEYS else _Matcher(keys)
    found: set[str] = set()
    _collect(value, matcher, found, secret=False)
    return {item for item in found if len(item) >= MIN_SECRET_LENGTH}


def _collect(value: Any, matcher: _Matcher, found: set[str], *, secret: bool) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _collect(item, matcher, found, secret=secret or matcher.secret(key))
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, matcher, found, secret=secret)
    elif secret and isinstance(value, str | int | float) and not isinstance(value, bool):
        found.add(str(value))


def mask_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` and every ``TOKEN_PATTERNS`` match replaced by ``***``.

    Longer secrets are replaced first, so one that contains another is masked whole.
    """
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= MIN_SECRET_LENGTH and secret in text:
            text = text.replace(secret, REDACTED)
    for pattern in TOKEN_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return text
