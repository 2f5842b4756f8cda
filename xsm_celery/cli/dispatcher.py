"""The dispatcher an envelope replay goes through: ``--machine`` charts, ``--store`` state.

A replay re-sends the dead-lettered envelope to the machine that failed it, so the CLI
rebuilds that machine from the same chart files and logic the service uses, over the
service's own state store and inbox (the inbox turns a double replay into a duplicate).
Like ``--dlq``, ``--store`` must name an existing database: it is never created here.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xsm_celery.cli.base import CliError
from xsm_celery.cli.target import cwd_on_path, open_existing
from xsm_celery.errors import XsmError
from xsm_celery.persistence.opening import scheme_of

__all__ = ["build_dispatcher", "load_logic", "load_machine", "open_state_store"]


def load_logic(spec: str | None) -> Any:
    """The ``MachineLogic`` named by ``--logic module`` (its ``logic``) or ``module:attr``."""
    from xsm_celery.engine import MachineLogic

    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(
            f"cannot import --logic {spec!r}: {exc} (pass a dotted module "
            "importable from the current directory or PYTHONPATH, not a file path)"
        ) from None
    logic = getattr(module, attr or "logic", None)
    if callable(logic) and not isinstance(logic, MachineLogic):
        logic = logic()
    if not isinstance(logic, MachineLogic):
        raise CliError(
            f"cannot import --logic {spec!r}: {module_name}.{attr or 'logic'} is not "
            "a MachineLogic (or a function returning one)"
        )
    return logic


def load_machine(path: str, logic: Any) -> Any:
    """Build one ``--machine`` chart with ``logic``; any problem is a one-line refusal."""
    from xsm_celery.engine import create_machine

    if not Path(path).is_file():
        raise CliError(f"cannot load machine {path!r}: no such file")
    try:
        return create_machine(Path(path), logic=logic)
    except (XsmError, OSError, ValueError) as exc:
        raise CliError(f"cannot load machine {path!r}: {exc}") from None


def open_state_store(url: str) -> tuple[Any, Any]:
    """The existing state store and its inbox: ``sqlite:///path``, ``postgresql://...``,
    ``"django"`` or ``django://<alias>``."""
    scheme = scheme_of(url)
    if scheme == "django":
        return open_existing(url, "snapshots", "--store"), open_existing(url, "inbox", "--store")
    try:
        if scheme == "sqlite":
            return _sqlite_store(url)
        if scheme in ("postgresql", "postgres"):
            from xsm_celery.sqlalchemy import SQLAlchemyInbox, SQLAlchemyStore

            store = SQLAlchemyStore(url, create_table=False)
            return store, SQLAlchemyInbox(store, create_table=False)
    except XsmError as exc:
        raise CliError(f"cannot open --store {url!r}: {exc}") from None
    raise CliError(
        f"unsupported --store URL {url!r}; use sqlite:///state.db, postgresql://user@host/db "
        "or 'django'"
    )


def _sqlite_store(url: str) -> tuple[Any, Any]:
    from xsm_celery.persistence import SQLiteInbox, SQLiteStore
    from xsm_celery.sqlalchemy.connect import normalize_url, sqlite_path

    path = sqlite_path(normalize_url(url))
    if path is None or not path.is_file():
        raise CliError(
            f"no such --store SQLite database file: {str(path)!r}; check the path "
            "(sqlite:///rel.db is relative, sqlite:////abs.db absolute)"
        )
    store = SQLiteStore(path)
    return store, SQLiteInbox(store)


def build_dispatcher(
    store_url: str, machine_files: Sequence[str], logic_spec: str | None, *, machine_id: str
) -> Any:
    """An ``InboundDispatcher`` over the charts and the existing state store and inbox.

    An envelope type ``xsm.<machine id>.<EVENT>`` goes to the chart with that id; any other
    type goes to the chart whose id is the record's ``machine_id``. With no such chart the
    replay is refused ("no machine handles type ...").
    """
    from xsm_celery.eda import InboundDispatcher

    logic = load_logic(logic_spec)
    machines = {str(m.id): m for m in (load_machine(path, logic) for path in machine_files)}

    def machine_for(envelope_type: str) -> Any:
        parts = envelope_type.split(".")
        if len(parts) >= 3 and parts[0] == "xsm" and parts[1] in machines:
            return machines[parts[1]]
        return machines.get(machine_id)

    store, inbox = open_state_store(store_url)
    return InboundDispatcher(store, machine_for, inbox=inbox)
