"""Every test a document names as a guarantee's proof exists, so no row cites a test that is gone.

Every ``.md`` file under ``docs/`` is read, sub-folders such as ``docs/internals/`` included.

Rows name tests as ``tests/path.py::test_name``; a following ``::other_name`` in the same
cell names another test of the same file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_CITATION = re.compile(r"`(tests/[\w/]+\.py)?::(\w+)`|`(tests/[\w/]+\.py)`")


def _citations() -> list[tuple[str, str, str]]:
    """(document, test file, test name) for every cited test, in order."""
    found: list[tuple[str, str, str]] = []
    for doc in sorted((ROOT / "docs").rglob("*.md")):  # docs/internals/ too
        for line in doc.read_text().splitlines():
            current = ""
            for match in _CITATION.finditer(line):
                path, name, bare = match.groups()
                if bare:
                    current = bare
                    continue
                current = path or current
                if current:
                    found.append((doc.relative_to(ROOT).as_posix(), current, name))
    return found


@pytest.mark.parametrize(("doc", "path", "name"), _citations())
def test_a_cited_test_exists(doc: str, path: str, name: str) -> None:
    """The file exists and defines the test function or test class by that name."""
    source = ROOT / path
    assert source.exists(), f"{doc} cites {path}, which does not exist"
    assert re.search(rf"^(?:async def|def|class) {name}\b", source.read_text(), re.M), (
        f"{doc} cites {path}::{name}, which is not defined there"
    )


def test_the_documents_cite_tests() -> None:
    """The scan finds the guarantee tables (a broken pattern would pass every row vacuously)."""
    assert len(_citations()) >= 10
