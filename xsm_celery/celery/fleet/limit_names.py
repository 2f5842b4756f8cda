"""The name of a keyed fleet limit: the task and a digest of the key, never the key itself.

A per-key limit is keyed on an argument (``key=lambda api_key, **_: api_key``), and its
name travels far: Redis key names, INFO log lines, metrics labels, ``xsm-celery breakers``
and the admin's fleet page. A customer's API key must reach none of them, so the name holds
:func:`key_digest` of the value, the same digest on every surface, which an operator can
compute from a value they hold (``xsm-celery breakers digest VALUE``) to find
its limit. A limit built with ``display=True`` shows the value itself when it is short,
printable and not shaped like a secret (``mask_text`` finds none); otherwise the digest.
"""

from __future__ import annotations

import hashlib

from xsm_celery.engine.redact import mask_text

__all__ = ["DIGEST_CHARS", "MAX_DISPLAY_CHARS", "key_digest", "key_label", "limit_name"]

#: Hex characters of a key's digest: 64 bits, so two keys of one limit never meet.
DIGEST_CHARS = 16

#: Longest key value ``display=True`` shows; a longer one is shown as its digest.
MAX_DISPLAY_CHARS = 64

_REFUSED = frozenset("[]#")


def key_digest(value: object) -> str:
    """The stable digest of a key value: SHA-256 of ``str(value)``, first 16 hex characters."""
    return hashlib.sha256(str(value).encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def key_label(value: object, *, display: bool = False) -> str:
    """What stands for a key value in a limit's name: ``#<digest>``, or the value if shown."""
    text = str(value)
    if display and _showable(text):
        return text
    return f"#{key_digest(value)}"


def limit_name(task: str, value: object, *, display: bool = False) -> str:
    """The name of ``task``'s limit for one key value: ``task[#<digest>]`` or ``task[value]``."""
    return f"{task}[{key_label(value, display=display)}]"


def _showable(text: str) -> bool:
    return (
        0 < len(text) <= MAX_DISPLAY_CHARS
        and text.isprintable()
        and not _REFUSED.intersection(text)
        and mask_text(text) == text
    )
