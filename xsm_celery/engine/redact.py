"""Keep secrets and library-private keys out of logs, dead letters and public views.

``redact()`` masks values under secret-looking keys; ``public_context()`` drops the keys the
library keeps for itself (``_xsm_`` prefix, such as the dead-letter error chain).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "DEFAULT_REDACT_KEYS",
    "PRIVATE_CONTEXT_PREFIX",
    "REDACTED",
    "is_private_context_key",
    "public_context",
    "redact",
]

#: Context keys starting with this prefix belong to the library, not to the user.
PRIVATE_CONTEXT_PREFIX = "_xsm_"

#: The value that replaces a redacted one.
REDACTED = "***"

#: Key fragments treated as secret. Fragments of four letters or fewer must match a whole
#: word of the key (``pin`` masks ``pin_code`` but not ``shipping``); longer ones match
#: anywhere in it (``password`` masks ``db_password_hash``).
DEFAULT_REDACT_KEYS: tuple[str, ...] = (
    "password", "passwd", "pwd", "passphrase", "secret", "token", "api_key", "apikey",
    "access_key", "private_key", "authorization", "auth", "bearer", "credential", "cookie",
    "session", "signature", "otp", "pin", "card", "cvv", "cvc", "pan", "iban",
    "account_number", "routing", "swift", "mnemonic", "seed", "ssn", "dob", "date_of_birth",
    "email", "phone", "passport",
)  # fmt: skip

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
        return {
            k: REDACTED if matcher.secret(k) else _walk(v, matcher) for k, v in value.items()
        }
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
