"""Every runnable example of the seeds prints its OK line, unchanged, in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO.parent / "shared" / "seed_examples"

#: Examples whose packages are built by later work; they run, but may fail until then.
PENDING: dict[str, str] = {}


def _examples() -> list[object]:
    if not EXAMPLES.is_dir():
        pytest.fail(f"{EXAMPLES} not found; CI lays shared/ beside the checkout")
    params: list[object] = []
    for path in sorted(EXAMPLES.glob("[0-9][0-9]_*.py")):
        number = path.name[:2]
        marks = []
        if number in PENDING:
            marks.append(pytest.mark.xfail(reason=PENDING[number], strict=False))
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


@pytest.mark.parametrize("path", _examples())
def test_seed_example_prints_ok(path: Path) -> None:
    """The example runs with only its imports changed and prints 'OK <name>'."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TARGET": "xsm_celery"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "_run.py"), str(path)],
        check=False,
        capture_output=True,
        text=True,
        cwd=str(REPO),
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"OK {path.stem}" in result.stdout.splitlines(), result.stdout[-2000:]
