"""The AsyncAPI schema, its licence and its source note are in the built wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_ships_the_schema_with_its_licence(tmp_path: Path) -> None:
    """A wheel built from setup.cfg carries schemas/ so validation works offline once installed."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [wheel] = tmp_path.glob("xsm_celery-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("asyncapi-3.0.0.schema.json", "LICENSE", "README.md"):
        assert f"xsm_celery/eda/schemas/{name}" in names
