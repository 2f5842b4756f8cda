"""``xsm-celery asyncapi``: run for real as the installed script, and inside ``celery``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from celery.bin.celery import celery as celery_main
from click.testing import CliRunner

from tests.cli.conftest import Invoke
from xsm_celery.eda import validate_asyncapi

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "xsm-celery"
CHART = ROOT / "tests" / "cli" / "order_events.json"


def run(*args: str, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the console script as a real process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (pythonpath, str(ROOT)) if p)}
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def error_line(done: subprocess.CompletedProcess[str] | Any) -> str:
    """The single stderr line of a refused run; stdout stays empty."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("xsm asyncapi: error: ")
    assert done.stdout == ""
    return str(lines[0])


@pytest.mark.slow
def test_writes_a_valid_document_and_exits_0(tmp_path: Path) -> None:
    """The seed's command line writes a document that validates, with the server named."""
    out = tmp_path / "asyncapi.json"
    done = run(
        "asyncapi",
        str(CHART),
        "-o",
        str(out),
        "--server",
        "localhost:9092",
        "--protocol",
        "kafka",
        "--validate",
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "wrote" in done.stdout
    assert "valid" in done.stdout
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["servers"]["default"] == {"host": "localhost:9092", "protocol": "kafka"}
    assert doc["asyncapi"] == "3.0.0"
    assert list(doc["channels"]["inbound"]["messages"]) == ["xsm.order.PAY"]
    assert set(doc["channels"]["outbound"]["messages"]) == {
        "order.paid",
        "xsm.order.transition.paid",
    }
    assert "1 consumed, 2 published" in done.stdout
    validate_asyncapi(doc)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_without_output_the_document_is_the_only_stdout(tmp_path: Path) -> None:
    """Without -o the JSON document is printed alone on stdout."""
    done = run("asyncapi", str(CHART), "--inbound-topic", "orders")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["channels"]["inbound"]["address"] == "orders"
    assert "servers" not in doc


@pytest.mark.slow
def test_validate_without_jsonschema_exits_2_naming_the_fix(tmp_path: Path) -> None:
    """With jsonschema not importable, --validate is refused in one line; nothing is written."""
    shadow = tmp_path / "shadow" / "jsonschema"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ImportError('hidden for the test', name='jsonschema')\n"
    )
    out = tmp_path / "asyncapi.json"
    done = run("asyncapi", str(CHART), "-o", str(out), "--validate", pythonpath=str(shadow.parent))
    assert done.returncode == 2
    line = error_line(done)
    assert "--validate needs jsonschema" in line
    assert "xsm-celery[asyncapi]" in line
    assert not out.exists()
    plain = run("asyncapi", str(CHART), "-o", str(out), pythonpath=str(shadow.parent))
    assert plain.returncode == 0, plain.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["asyncapi", "missing.json"], "cannot load machine 'missing.json': no such file"),
        (["asyncapi", str(CHART), "--server", ""], "--server must not be empty"),
        (
            ["asyncapi", str(CHART), "--server", "h", "--protocol", " "],
            "--protocol must not be empty",
        ),
        (["asyncapi", str(CHART), "--server", "h"], "--server needs --protocol"),
        (["asyncapi", str(CHART), "--protocol", "kafka"], "--protocol needs --server"),
        (
            ["asyncapi", str(CHART), "-o", "/nonexistent-dir/x.json"],
            "cannot write '/nonexistent-dir/x.json'",
        ),
        (["asyncapi"], "give a CHART file or --workflow NAME"),
    ],
)
def test_refused_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    """Bad paths and empty options are one line on stderr and exit 2."""
    done = run(*args)
    assert done.returncode == 2, done.stderr
    assert message in error_line(done)


def test_an_invalid_chart_is_refused(invoke: Invoke, tmp_path: Path) -> None:
    """A chart that does not load (bad JSON, bad shape, bad meta.publish) exits 2."""
    for text in (
        "{not json",
        '{"id": "x"}',
        '{"id": "x", "initial": "a", "states": {"a": {"on": {"GO": {"meta": {"publish": 5}}}}}}',
    ):
        path = tmp_path / "bad.json"
        path.write_text(text)
        result = invoke("asyncapi", str(path))
        assert result.exit_code == 2, result.output
        assert "xsm asyncapi: error: cannot load machine" in result.stderr


def test_an_invalid_document_exits_1_and_writes_nothing(
    invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If --validate rejects the document, the error names the field and no file is written."""
    from xsm_celery.eda import asyncapi as module

    real = module.asyncapi_document

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        doc = real(*args, **kwargs)
        doc["info"].pop("version")
        return doc

    monkeypatch.setattr(module, "asyncapi_document", broken)
    out = tmp_path / "a.json"
    result = invoke("asyncapi", str(CHART), "-o", str(out), "--validate")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "xsm asyncapi: error: document is not valid AsyncAPI 3.0: $.info: "
        "'version' is a required property"
    )
    assert not out.exists()


def test_the_command_runs_inside_celery(tmp_path: Path) -> None:
    """``celery -A proj xsm asyncapi`` is the same command."""
    out = tmp_path / "doc.json"
    result = CliRunner().invoke(
        celery_main,
        ["-A", "tests.cli.proj:app", "xsm", "asyncapi", str(CHART), "-o", str(out), "--validate"],
    )
    assert result.exit_code == 0, result.output
    validate_asyncapi(json.loads(out.read_text(encoding="utf-8")))


@pytest.mark.slow
def test_workflow_option_documents_the_celery_task_message(tmp_path: Path) -> None:
    """``celery -A app xsm asyncapi --workflow orders`` writes the step task's message."""
    out = tmp_path / "orders.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XSM_TEST_QUEUE": "orders-steps"}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "celery", "-A", "tests.celery.workflow_workerapp", "xsm"),
            *("asyncapi", "--workflow", "orders", "--validate", "-o", str(out)),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(out.read_text())
    validate_asyncapi(document)
    assert document["channels"]["steps"]["address"] == "orders-steps"
    pay = document["components"]["messages"]["step.PAY"]
    assert pay["headers"]["allOf"][1]["properties"]["task"]["const"] == "xsm.workflow.orders"
    assert done.stdout.startswith(f"wrote {out}: 8 consumed")


def test_workflow_option_needs_an_app_and_no_chart(invoke: Invoke) -> None:
    """--workflow without an app, or with a CHART too, is a one-line refusal."""
    alone = invoke("asyncapi", "--workflow", "orders")
    assert alone.exit_code == 2
    assert error_line(alone).endswith(
        "needs a Celery app: pass --app module:app "
        "(or run it as: celery -A proj xsm asyncapi --workflow NAME)"
    )
    both = invoke("asyncapi", str(CHART), "--workflow", "orders")
    assert both.exit_code == 2
    assert "one of them" in error_line(both)
