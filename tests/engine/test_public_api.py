"""The engine's public names import from where the contract and the seeds say."""

from __future__ import annotations

import importlib

import pytest

import xsm_celery
import xsm_celery.engine
import xsm_celery.plugins

TOP_LEVEL = (
    "MachineLogic",
    "SimulatedClock",
    "WallClock",
    "SyncInterpreter",
    "Interpreter",
    "create_machine",
    "from_callback",
    "Event",
    "PluginBase",
    "LoggingInspector",
    "public_context",
    "PRIVATE_CONTEXT_PREFIX",
    "InterpreterStoppedError",
    "XStateMachineError",
    "XsmError",
    "RunawayChainError",
    "MissingExtraError",
    "InvalidConfigError",
    "StateNotFoundError",
    "ImplementationMissingError",
    "NotSupportedError",
)


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_names(name: str) -> None:
    """Each engine name the contract lists is importable from xsm_celery."""
    assert name in xsm_celery.__all__
    assert getattr(xsm_celery, name) is not None


@pytest.mark.parametrize("module", ["xsm_celery", "xsm_celery.engine", "xsm_celery.plugins"])
def test_all_lists_only_real_names(module: str) -> None:
    """Every name in __all__ exists, so star-imports and docs never lie."""
    mod = importlib.import_module(module)
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert missing == []


def test_plugins_module_exposes_the_seed_names() -> None:
    """xsm_celery.plugins offers register_global and redact, and the engine's PluginBase."""
    assert xsm_celery.plugins.register_global is xsm_celery.engine.register_global
    assert xsm_celery.plugins.redact is xsm_celery.redact
    assert xsm_celery.plugins.PluginBase is xsm_celery.engine.plugins.PluginBase


def test_top_level_and_engine_names_are_the_same_objects() -> None:
    """Re-exports are aliases, not copies."""
    for name in ("SyncInterpreter", "Interpreter", "MachineLogic", "SimulatedClock", "Event"):
        assert getattr(xsm_celery, name) is getattr(xsm_celery.engine, name)
    assert xsm_celery.PRIVATE_CONTEXT_PREFIX == "_xsm_"
