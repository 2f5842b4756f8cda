"""The dispatcher an envelope replay goes through: ``--machine`` charts, ``--store`` state.

The replay re-sends the dead-lettered envelope to the machine that failed it, so the CLI
rebuilds that machine from the same chart files and logic module the service uses.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xsm_celery.cli.base import CliError

__all__ = ["build_dispatcher", "load_machine"]


def load_machine(path: str, logic_module: str | None) -> Any:
    """Build one ``--machine`` chart with the logic of ``--logic``; bad input is a refusal."""
    from xsm_celery import create_machine  # type: ignore[attr-defined, unused-ignore]

    logic = None
    if logic_module:
        try:
            module = importlib.import_module(logic_module)
        except ImportError as exc:
            raise CliError(f"cannot import --logic {logic_module!r}: {exc} (pass a dotted module "
                           "importable from the current directory or PYTHONPATH)") from None
        logic = getattr(module, "logic", None) or getattr(module, "LOGIC", None)
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot load machine {path!r}: {exc}") from None
    if not isinstance(config, dict):
        raise CliError(f"cannot load machine {path!r}: not a JSON object")
    try:
        return create_machine(config, logic=logic)
    except Exception as exc:  # a chart the engine refuses, whatever the reason
        raise CliError(f"cannot load machine {path!r}: {exc}") from None


def build_dispatcher(store_url: str, machine_files: Sequence[str], logic: str | None) -> Any:
    """An ``InboundDispatcher`` over the machines and the existing state store."""
    from xsm_celery import eda

    dispatcher_class = getattr(eda, "InboundDispatcher", None)
    if dispatcher_class is None:
        raise CliError("replaying envelopes needs xsm_celery.eda.InboundDispatcher, which this "
                       "installation lacks; upgrade xsm-celery")
    machines = {}
    for path in machine_files:
        machine = load_machine(path, logic)
        machines[str(machine.id)] = machine

    def machine_for(envelope_type: str) -> Any:
        parts = envelope_type.split(".")
        if len(parts) >= 3 and parts[0] == "xsm" and parts[1] in machines:
            return machines[parts[1]]
        return next(iter(machines.values())) if len(machines) == 1 else None

    return dispatcher_class(_open_state_store(store_url), machine_for)


def _open_state_store(url: str) -> Any:
    from xsm_celery import persistence

    opener = getattr(persistence, "open_store", None)
    if opener is None:
        raise CliError("replaying envelopes needs xsm_celery.persistence.open_store, which this "
                       "installation lacks; upgrade xsm-celery")
    try:
        return opener(url, must_exist=True)
    except Exception as exc:  # a store the persistence layer refuses
        raise CliError(f"cannot open --store {url!r}: {exc}") from None
