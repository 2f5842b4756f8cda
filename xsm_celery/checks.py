"""Checks every part of the package applies to the options and settings it is given.

One home for them, so a count option says the same thing in the breaker, the kombu adapter
and the settings, and an unknown setting is answered with the same sentence (with the
closest known name when there is one) in the Celery and the Django integration.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from xsm_celery.errors import ConfigurationError

__all__ = ["key_names", "positive_int", "unknown_name_message"]


def positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an ``int`` of at least 1 (a ``bool`` is not a count).

    Raises:
        ValueError: naming the option and the value it got.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def unknown_name_message(what: str, name: str, known: Iterable[str]) -> str:
    """The sentence that refuses an unknown setting: the closest valid name, then all of them.

    ``what`` says where the name was found (``"Celery setting"``, ``"XSM_CELERY key"``).
    """
    names = sorted(known)
    close = difflib.get_close_matches(name.lower(), names, n=1) or difflib.get_close_matches(
        name, names, n=1
    )
    hint = f"; did you mean {close[0]!r}?" if close else "."
    return f"unknown {what} {name!r}{hint} Valid names: {', '.join(names)}"


def key_names(name: str, value: object) -> tuple[str, ...]:
    """Return ``value`` as a tuple of key names if it is a list, tuple or set of strings.

    A lone string is refused too: ``"iban"`` would otherwise become ``("i", "b", "a", "n")``.

    Raises:
        ValueError: naming the setting, the value it got and an example.
    """
    if isinstance(value, list | tuple | set | frozenset) and all(
        isinstance(item, str) and item for item in value
    ):
        return tuple(value)
    raise ConfigurationError(
        f"{name}={value!r} must be a list of key names, for example ['card_number', 'iban']"
    )
