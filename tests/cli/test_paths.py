"""``xsm-celery paths CHART``: the installed script prints shortest and coverage paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "xsm-celery"

CHART = {
    "id": "m",
    "initial": "idle",
    "states": {
        "idle": {
            "on": {
                "GO": [{"target": "busy", "guard": "ok"}, {"target": "failed"}],
                "NOTE": {"actions": "note"},
            }
        },
        "busy": {"after": {"1000": "done"}, "on": {"BACK": "idle"}},
        "failed": {"type": "final"},
        "done": {"type": "final"},
        "orphan": {"on": {"X": "idle"}},
    },
}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the console script as a real process."""
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def chart(tmp_path: Path) -> str:
    """The guarded chart as a file."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps(CHART))
    return str(path)


def test_paths_prints_the_shortest_path_to_each_configuration(chart: str) -> None:
    """One line per reachable configuration: its states, its steps and the guards it needs."""
    result = run("paths", chart)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "idle    (start)",
        "busy    GO",
        "failed  GO  [guard:ok=False]",
        "done    GO,+1000",
    ]


def test_coverage_lists_each_transition_and_the_ones_no_path_takes(chart: str) -> None:
    """--coverage: one path per transition; a transition out of an unreachable state is named."""
    result = run("paths", chart, "--coverage")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "busy --after 1000--> done  GO,+1000",
        "busy --on 'BACK'--> idle   GO,BACK",
        "idle --on 'GO'--> busy     GO",
        "idle --on 'GO'--> failed   GO  [guard:ok=False]",
        "idle --on 'NOTE'--> idle   NOTE",
        "# not taken within 50 steps: orphan --on 'X'--> idle",
    ]


def test_guards_and_json(chart: str) -> None:
    """--guards false keeps only the refused branch; --json gives each step's fields."""
    result = run("paths", chart, "--guards", "false", "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows == [
        {"states": ["m.idle"], "events": "", "steps": []},
        {
            "states": ["m.failed"],
            "events": "GO",
            "steps": [
                {
                    "event": "GO",
                    "delay_ms": None,
                    "to": ["m.failed"],
                    "assumptions": ["guard:ok=False"],
                }
            ],
        },
    ]


def test_a_bad_chart_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """An unreadable chart and an unknown --guards value both exit 2."""
    missing = run("paths", str(tmp_path / "nope.json"))
    assert missing.returncode == 2
    assert missing.stderr.startswith("xsm paths: error: cannot read chart")
    path = tmp_path / "m.json"
    path.write_text(json.dumps(CHART))
    assert run("paths", str(path), "--guards", "maybe").returncode == 2
