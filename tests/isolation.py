"""Run a test body that forks in a fresh interpreter.

kombu closes every inherited broker connection pool in a forked child; when an earlier test
in the same pytest process left a Redis channel waiting in BRPOP, that clean-up reads the
parent's socket for ever and the child hangs. A test about fork() behaviour therefore runs
its scenario in a new Python process, where nothing but the scenario has been imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_fresh(module: str, function: str, *args: str, timeout: float = 120) -> None:
    """Call ``module.function(*args)`` in a new interpreter; fail with its output if it fails."""
    code = f"import importlib, sys; getattr(importlib.import_module({module!r}), {function!r})(*sys.argv[1:])"
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{module}.{function} failed:\n{result.stdout}\n{result.stderr}"
