"""``xsm-celery metrics``: one scrape on stdout, and one-line errors naming the command."""

from __future__ import annotations

import socket
import uuid

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from xsm_celery.cli.group import cli

pytestmark = pytest.mark.service

APP = "tests.metrics.fleetapp"


def test_once_prints_the_queue_lengths_of_the_app_and_the_named_queues(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--once`` prints a scrape with every routed queue and each ``--queue``, then exits 0."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    extra = f"xsm-cmd-{uuid.uuid4().hex[:8]}"
    result = CliRunner().invoke(
        cli,
        ["metrics", "--app", APP, "--once", "--no-workers", "--no-stores", "--queue", extra],
    )
    assert result.exit_code == 0, result.output
    from tests.metrics import fleetapp

    lengths = {
        sample.labels["queue_name"]: sample.value
        for family in text_string_to_metric_families(result.stdout)
        if family.name == "celery_queue_length"
        for sample in family.samples
    }
    assert set(lengths) == {fleetapp.QUEUE, fleetapp.PARKED, extra}
    assert lengths[extra] == 0
    assert "PROMETHEUS_MULTIPROC_DIR is not set" in result.stderr


def test_a_taken_port_is_one_line_naming_the_command(redis_url: str) -> None:
    """The port in use: exit 2 and ``xsm metrics: error: ...`` saying how to share one."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            cli, ["metrics", "--app", APP, "--port", str(port), "--no-workers", "--no-stores"]
        )
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("xsm metrics: error: cannot serve metrics on 127.0.0.1:")
    assert "PROMETHEUS_MULTIPROC_DIR" in lines[-1]


def test_no_app_is_refused_in_one_line() -> None:
    """Without ``--app`` (and outside ``celery -A``) the command says how to name one."""
    result = CliRunner().invoke(cli, ["metrics", "--once"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "xsm metrics: error: needs a Celery app: pass --app module:app "
        "(or: celery -A proj xsm metrics)"
    )
