"""The structure hash changes with the chart's shape and only with it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.charts import NAMES, load, path
from xsm_celery import create_machine
from xsm_celery.engine import structure_hash


def hash_of(change: Any) -> str:
    """The hash of the retry fixture after ``change(config)``."""
    config = load("retry")
    change(config)
    return create_machine(config).structure_hash


BASE = hash_of(lambda c: None)


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["states"].__setitem__("paused", {}),
        lambda c: c["states"]["retrying"]["after"].__setitem__("500", "done"),
        lambda c: c["states"]["retrying"]["after"]["retryDelay"][0].__setitem__("guard", "other"),
        lambda c: c["states"]["attempting"]["invoke"].__setitem__("src", "otherWork"),
        lambda c: c["states"]["attempting"]["invoke"]["onDone"].__setitem__(
            "target", "deadLettered"
        ),
        lambda c: c["states"]["done"].__setitem__("tags", ["ok"]),
        lambda c: c.__setitem__("initial", "retrying"),
        lambda c: c["states"]["attempting"].__setitem__("entry", "log"),
        lambda c: c.__setitem__("id", "job2"),
    ],
)
def test_structural_changes_change_the_hash(change: Any) -> None:
    """States, timers, guards, services, targets, tags, initial, actions and id all count."""
    assert hash_of(change) != BASE


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["context"].__setitem__("attempt", 7),
        lambda c: c.__setitem__("version", "2"),
        lambda c: c["states"]["done"].__setitem__("meta", {"doc": "ok"}),
        lambda c: c["states"]["done"].__setitem__("description", "finished"),
        lambda c: c["states"]["done"].__setitem__("x-position", [1, 2]),
    ],
)
def test_data_and_documentation_do_not_change_the_hash(change: Any) -> None:
    """Initial context, version, meta, descriptions and x- keys leave the hash alone."""
    assert hash_of(change) == BASE


def test_hash_ignores_key_order() -> None:
    """Reordering keys of the chart dict does not change the hash."""
    config = load("retry")
    reordered = {k: config[k] for k in reversed(list(config))}
    assert create_machine(reordered).structure_hash == BASE


@pytest.mark.parametrize("name", NAMES)
def test_hash_is_stable_across_processes(name: str) -> None:
    """Another interpreter process computes the same hash for the same chart."""
    code = (
        "import json,sys; from xsm_celery.engine import structure_hash; "
        "print(structure_hash(json.load(sys.stdin)))"
    )
    chart = path(name).read_text()
    out = subprocess.run(
        [sys.executable, "-c", code], input=chart, capture_output=True, text=True, check=True
    )
    assert (
        out.stdout.strip()
        == structure_hash(load(name))
        == create_machine(load(name)).structure_hash
    )
    assert len(out.stdout.strip()) == 16
