"""mypy checks that every shipped store, lock, plugin and adapter conforms to its Protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parent.parent
CONTRACTS = ROOT / "tests" / "typing" / "contracts.py"

DRIFTED = """
from contextlib import nullcontext
from typing import Any
from xsm_celery.persistence import StateStore, StoredSnapshot


class Drifted:
    def load(self, key: str) -> StoredSnapshot | None: ...
    def save(self, key: str, snapshot: str) -> int: ...
    def delete(self, key: str) -> bool: ...
    def list_keys(self, *, prefix: str = "", limit: int = 1000) -> list[str]: ...
    def lock(self, key: str, *, timeout: float = 10.0) -> Any: ...


store: StateStore = Drifted()
"""


def _mypy(*paths: str) -> tuple[str, int]:
    out, err, status = mypy_api.run(["--strict", "--no-error-summary", *paths])
    return out + err, status


@pytest.mark.slow
def test_the_shipped_implementations_conform() -> None:
    """The typing-only module type-checks: no store's signatures drifted from its Protocol."""
    report, status = _mypy(str(CONTRACTS))
    assert status == 0, report


@pytest.mark.slow
def test_a_drifted_store_is_caught(tmp_path: Path) -> None:
    """A store whose save() lost its keyword arguments is refused by mypy (the check can fail)."""
    module = tmp_path / "drifted.py"
    module.write_text(DRIFTED)
    report, status = _mypy(str(module))
    assert status == 1
    assert '"Drifted"' in report
    assert '"StateStore"' in report
    assert "save" in report
