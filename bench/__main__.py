"""Run every benchmark module in one go: ``python -m bench [name ...]``.

Each ``bench/bench_*.py`` runs in its own interpreter so one peer's import side effects or a
crash cannot disturb the others; their tables print in name order, one run, side by side.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    """Run the named benchmark modules (all of them by default); return the worst exit code."""
    modules = sorted(p.stem for p in HERE.glob("bench_*.py"))
    chosen = [m for m in modules if not argv or any(a in m for a in argv)]
    worst = 0
    for name in chosen:
        print(f"\n## {name}\n", flush=True)
        result = subprocess.run(
            [sys.executable, "-m", f"bench.{name}"], cwd=HERE.parent, check=False
        )
        worst = max(worst, result.returncode)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
