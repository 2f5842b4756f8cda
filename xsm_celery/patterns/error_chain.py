"""The error chain a dead letter carries: plain strings, cut short, secrets masked.

The chain rides in the machine's context (``ERRORS_CONTEXT_KEY``) so it survives the
create, act, persist, discard cycle of production workers, where every attempt runs in a
fresh interpreter, possibly in another process. Everything that rides in a snapshot must be
JSON, bounded and free of secrets, hence entries are ``{source, name, type, message}``
strings, never exception objects, and messages are masked and cut before they are stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from xsm_celery.engine import redact

__all__ = [
    "ERRORS_CONTEXT_KEY",
    "MAX_ERROR_MESSAGE",
    "error_entry",
    "mask_secrets",
    "truncate_message",
]

#: Context key holding the chain; the ``_xsm_`` prefix keeps it out of public_context().
ERRORS_CONTEXT_KEY = "_xsm_errors"

#: Longest stored error message, in characters (the chain is copied into every snapshot).
MAX_ERROR_MESSAGE = 1000

#: Shortest secret value that is searched for in messages; shorter ones mask innocent text.
_MIN_SECRET_LENGTH = 4


def error_entry(
    source: str,
    name: str,
    error: BaseException,
    *,
    context: Mapping[str, Any] | None = None,
    redact_keys: Iterable[str] | None = None,
) -> dict[str, str]:
    """Describe one failure as the four strings a dead letter stores.

    Args:
        source: What failed: ``"service"`` or ``"action"`` (a task integration may add its own).
        name: The service ``src`` or action type that failed.
        error: The exception; only its class name and message are kept.
        context: The machine context; any secret value in it is masked in the message.
        redact_keys: The key denylist for masking (the engine's default when None).
    """
    message = mask_secrets(str(error), context, redact_keys)
    return {
        "source": str(source),
        "name": str(name),
        "type": type(error).__name__,
        "message": truncate_message(message),
    }


def truncate_message(message: str, limit: int = MAX_ERROR_MESSAGE) -> str:
    """Cut ``message`` to at most ``limit`` characters, marking the cut with an ellipsis."""
    if len(message) <= limit:
        return message
    return message[: limit - 1] + "\u2026"


def mask_secrets(
    message: str, context: Mapping[str, Any] | None, redact_keys: Iterable[str] | None = None
) -> str:
    """Replace every secret context value that appears in ``message`` with ``***``.

    ``redact()`` masks by key, but an exception text such as ``"card tok_live_9 declined"``
    carries the value itself; the values ``redact()`` would mask are searched for here.
    """
    if not context or not message:
        return message
    for secret in sorted(_secret_values(context, redact_keys), key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


def _secret_values(context: Mapping[str, Any], redact_keys: Iterable[str] | None) -> set[str]:
    """The string values (at any depth) that ``redact()`` masks in ``context``."""
    plain = dict(context)
    masked = redact(plain) if redact_keys is None else redact(plain, tuple(redact_keys))
    found: set[str] = set()
    _collect(plain, masked, found)
    return found


def _collect(original: Any, masked: Any, found: set[str]) -> None:
    """Walk both trees side by side and note each string that differs after masking."""
    if isinstance(original, str):
        if original != masked and len(original) >= _MIN_SECRET_LENGTH:
            found.add(original)
        return
    if isinstance(original, Mapping) and isinstance(masked, Mapping):
        for key, value in original.items():
            if key in masked:
                _collect(value, masked[key], found)
        return
    if isinstance(original, list | tuple) and isinstance(masked, list | tuple):
        for left, right in zip(original, masked, strict=False):
            _collect(left, right, found)
        return
    if isinstance(original, Mapping | list | tuple) and masked != original:
        _collect_all(original, found)


def _collect_all(value: Any, found: set[str]) -> None:
    """Note every string under a container that ``redact()`` replaced as a whole."""
    if isinstance(value, str):
        if len(value) >= _MIN_SECRET_LENGTH:
            found.add(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect_all(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_all(item, found)
