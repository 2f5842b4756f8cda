"""The structure hash: a fingerprint of a chart's shape, not of its data.

A snapshot records the hash of the chart it was taken from; restoring it against a chart with
another hash is refused, because the state ids and timers it names may no longer mean the same
thing. So the hash covers states, types, initial states, transitions, guards, actions, timers,
invocations and tags, and leaves out what does not change how a snapshot restores: the initial
``context``, ``meta``, ``description``, ``version`` and ``x-`` tooling keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["NON_STRUCTURAL_KEYS", "structure_hash"]

#: Keys whose values do not affect the structure hash, at any depth of the chart.
NON_STRUCTURAL_KEYS = frozenset({"context", "meta", "description", "version"})


def _structural(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            str(k): _structural(v)
            for k, v in value.items()
            if k not in NON_STRUCTURAL_KEYS and not str(k).startswith("x-")
        }
    if isinstance(value, (list, tuple)):
        return [_structural(v) for v in value]
    return value


def _stable_name(value: Any) -> str:
    """A callable in a Python-built chart hashes by its qualified name, not its address."""
    name = getattr(value, "__qualname__", None)
    if isinstance(name, str):
        return f"{getattr(value, '__module__', '')}.{name}"
    return type(value).__qualname__


def structure_hash(config: Mapping[str, Any]) -> str:
    """A 16-hex-digit digest of the chart's structure (stable across processes and runs)."""
    canonical = json.dumps(
        _structural(config), sort_keys=True, separators=(",", ":"), default=_stable_name
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
