"""Who an operator is and how old "old" is: shared by the CLI, the Django commands and replays.

Every audit row names an actor, and every purge by age reads a duration such as ``30d``; the
command-line tool, the Django management command, the admin and the replay functions must agree
on both, so they live here once. Standard library only.
"""

from __future__ import annotations

import getpass
import re

from xsm_celery.errors import ConfigurationError

__all__ = ["AGE_UNITS_S", "PURGE_ALL", "UNKNOWN_ACTOR", "current_actor", "parse_age"]

#: Seconds per unit of an age (``90s``, ``15m``, ``12h``, ``30d``, ``2w``).
AGE_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}

#: The audit ``record_id`` of a purge by age, which concerns every matching record.
PURGE_ALL = "*"

#: The actor recorded when the process has no login name (a container without a passwd entry).
UNKNOWN_ACTOR = "unknown"

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def current_actor(actor: str | None = None) -> str:
    """``actor`` if given, else the login name of this process's user, for audit rows."""
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return UNKNOWN_ACTOR


def parse_age(text: str) -> float:
    """``90s``, ``15m``, ``12h``, ``30d`` or ``2w`` as seconds.

    Raises:
        ValueError: the text is not a number followed by one of s, m, h, d, w; the message
            says so with examples, ready for a command's error line.
    """
    match = _AGE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigurationError(
            f"invalid --older-than {text!r}: use a number and a unit, e.g. 90s, 15m, 12h, 30d, 2w"
        )
    return float(match.group(1)) * AGE_UNITS_S[match.group(2)]
