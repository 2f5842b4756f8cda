"""xsm inspect / diagram / simulate / validate / docs, and to_mermaid() in Python."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner

from tests.cli.conftest import Invoke
from xsm_celery import MachineLogic, create_machine
from xsm_celery.charttools import to_mermaid
from xsm_celery.patterns import CIRCUIT_BREAKER_CONFIG

SOCKET = {
    "id": "socket",
    "initial": "disconnected",
    "context": {"attempt": 0},
    "states": {
        "disconnected": {"on": {"CONNECT": "connecting"}},
        "connecting": {
            "invoke": {
                "src": "connect",
                "onDone": {"target": "connected", "actions": "retryReset"},
                "onError": {"target": "reconnecting", "actions": "retryBump"},
            }
        },
        "connected": {
            "on": {
                "DROPPED": {"target": "reconnecting", "actions": "retryBump"},
                "DISCONNECT": "disconnected",
            }
        },
        "reconnecting": {
            "after": {
                "retryDelay": [
                    {"guard": "retryCanRetry", "target": "connecting"},
                    {"target": "failed"},
                ]
            },
            "on": {"DISCONNECT": "disconnected"},
        },
        "failed": {"on": {"CONNECT": "connecting"}, "tags": ["dead-letter"]},
    },
}


@pytest.fixture
def socket_chart(tmp_path: Path) -> str:
    """The seed's websocket-reconnect chart as a file."""
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(SOCKET))
    return str(path)


def test_inspect_prints_the_panel_and_the_state_tree(invoke: Invoke, tmp_path: Path) -> None:
    """inspect shows machine, version, counts by kind, events, timers, invokes, logic and the tree."""
    path = tmp_path / "circuit_breaker.json"
    path.write_text(json.dumps(CIRCUIT_BREAKER_CONFIG))
    result = invoke("inspect", str(path))
    assert result.exit_code == 0, result.output
    out = result.output
    assert re.search(r"Machine\s+circuitBreaker\s+Version\s+1", out)
    assert re.search(r"States\s+3\s+atomic 3", out)
    assert re.search(r"Timers\s+1", out)
    assert "1 named delays" in out
    assert "circuit_breaker.json" in out
    assert "◆ circuitBreaker  initial=closed" in out
    assert "○ open  after cooldown  #rejecting" in out


def test_diagram_writes_mermaid_and_svg(invoke: Invoke, socket_chart: str, tmp_path: Path) -> None:
    """diagram --format mermaid prints stateDiagram-v2; --format svg writes the admin's drawing."""
    result = invoke("diagram", socket_chart, "--format", "mermaid")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("stateDiagram-v2\n")
    assert (
        "socket_reconnecting --> socket_connecting : after retryDelay [retryCanRetry]"
        in result.output
    )
    assert "socket_connecting --> socket_connected : onDone / retryReset" in result.output
    out = tmp_path / "chart.svg"
    result = invoke(
        "diagram", socket_chart, "--format", "svg", "--marked", "socket.failed", "-o", str(out)
    )
    assert result.exit_code == 0, result.output
    svg = out.read_text()
    assert svg.startswith("<svg")
    assert "reconnecting" in svg


def test_simulate_prints_each_step_with_stub_logic(invoke: Invoke, socket_chart: str) -> None:
    """The seed's run: a drop, then the user leaves mid-backoff; no retry fires."""
    result = invoke("simulate", socket_chart, "--events", "CONNECT,DROPPED,DISCONNECT")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert result.stderr.startswith("xsm simulate: note: named delays left unresolved")
    assert [line.split("->")[1].split()[0] for line in lines[:4]] == [
        "socket.disconnected",
        "socket.connected",
        "socket.reconnecting",
        "socket.disconnected",
    ]
    assert lines[-1] == "# -> socket.disconnected"
    assert "UnresolvedDelayError" in lines[2]


def test_simulate_with_logic_uses_it(
    invoke: Invoke, socket_chart: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--logic MODULE supplies real logic: the bump action runs and the JSON lines show it."""
    (tmp_path / "socket_logic.py").write_text(
        "from xsm_celery import MachineLogic\n"
        "logic = MachineLogic(actions={'retryBump': lambda i, c, e, a: c.update(attempt=c['attempt'] + 1)})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    result = invoke(
        "simulate", socket_chart, "--events", "CONNECT,DROPPED", "--logic", "socket_logic", "--json"
    )
    assert result.exit_code == 0, result.output
    steps = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert [s["context"]["attempt"] for s in steps] == [0, 0, 1]


def test_validate_lists_every_problem_with_its_path_and_exits_2(
    invoke: Invoke, tmp_path: Path
) -> None:
    """Two structural problems and an unknown key under --strict are all reported, exit 2."""
    bad = {
        "id": "m",
        "initial": "a",
        "states": {"a": {"on": {"GO": "nowhere"}, "colour": "red"}, "b": {"type": "weird"}},
    }
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert "states.b.type: InvalidConfigError" in result.output
    assert "states.a.on.GO: StateNotFoundError" in result.output
    assert "states.a.colour" not in result.output
    strict = invoke("validate", str(path), "--strict")
    assert strict.exit_code == 2
    assert "states.a.colour: InvalidConfigError" in strict.output
    assert "3 problem(s)" in strict.output


def test_validate_passes_a_good_chart_and_refuses_an_unreadable_one(
    invoke: Invoke, socket_chart: str, tmp_path: Path
) -> None:
    """A valid chart exits 0; a missing file is a one-line error with exit 2."""
    assert invoke("validate", socket_chart).exit_code == 0
    missing = invoke("validate", str(tmp_path / "nope.json"))
    assert missing.exit_code == 2
    assert missing.output.startswith("xsm validate: error: cannot read chart")


def test_docs_writes_a_markdown_page(invoke: Invoke, socket_chart: str) -> None:
    """docs prints a page with the Mermaid diagram, the states and events tables and publications."""
    result = invoke("docs", socket_chart)
    assert result.exit_code == 0, result.output
    page = result.output
    assert page.startswith("# socket\n")
    assert "```mermaid\nstateDiagram-v2" in page
    assert "| `socket.failed` | atomic | dead-letter |" in page
    assert "| `socket.connected` | DROPPED / retryBump | `socket.reconnecting` |" in page
    assert "## Publications" in page


def test_chart_tools_run_under_celery_xsm(socket_chart: str) -> None:
    """celery -A proj xsm inspect|diagram|... are the same commands."""
    result = CliRunner().invoke(
        celery_main, ["-A", "tests.cli.proj:app", "xsm", "diagram", socket_chart]
    )
    assert result.exit_code == 0, result.output
    assert "stateDiagram-v2" in result.output


def test_to_mermaid_draws_nesting_parallel_history_and_finals() -> None:
    """to_mermaid nests compound states, separates regions, marks history and finals."""
    machine = create_machine(
        {
            "id": "m",
            "initial": "p",
            "states": {
                "p": {
                    "type": "parallel",
                    "states": {
                        "r1": {
                            "initial": "a",
                            "states": {
                                "a": {"on": {"GO": {"target": "b", "guard": "ok"}}},
                                "b": {"type": "final"},
                                "h": {"type": "history", "history": "deep"},
                            },
                        },
                        "r2": {"initial": "x", "states": {"x": {}}},
                    },
                },
            },
        },
        logic=MachineLogic(guards={"ok": lambda c, e: True}),
    )
    text = to_mermaid(machine)
    assert text == machine.to_mermaid()
    assert 'state "p" as m_p {' in text
    assert "        --\n" in text
    assert 'state "H*" as m_p_r1_h' in text
    assert "m_p_r1_b --> [*]" in text
    assert "m_p_r1_a --> m_p_r1_b : GO [ok]" in text
