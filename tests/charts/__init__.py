"""Charts used as test fixtures, kept as JSON files like the charts users ship."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: Every fixture chart by name (file stem).
NAMES = tuple(sorted(p.stem for p in HERE.glob("*.json")))


def load(name: str) -> dict[str, Any]:
    """A fresh copy of the fixture chart ``name`` (tests may mutate it)."""
    return json.loads((HERE / f"{name}.json").read_text("utf-8"))  # type: ignore[no-any-return]


def path(name: str) -> Path:
    """The file of the fixture chart ``name``."""
    return HERE / f"{name}.json"
