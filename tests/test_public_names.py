"""Every package of xsm_celery lists exactly its public names in ``__all__``."""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

import xsm_celery

#: Every package; one that needs a missing optional extra is skipped, not failed.
PACKAGES = [
    "xsm_celery",
    *sorted(
        info.name
        for info in pkgutil.walk_packages(xsm_celery.__path__, "xsm_celery.")
        if info.ispkg and not info.name.endswith(".migrations")
    ),
]


def _public(module: types.ModuleType) -> set[str]:
    """Names a reader would take as the package's API: no underscore, not a module."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_exactly_the_public_names(name: str) -> None:
    """Nothing public is missing from __all__, and __all__ names nothing that is not there."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        pytest.skip(f"{name} needs an extra that is not installed: {exc}")
    declared = list(getattr(module, "__all__", ()))
    assert len(declared) == len(set(declared)), "a name is listed twice"
    lazy = {n for n in declared if n not in vars(module)}
    assert {n for n in lazy if getattr(module, n, None) is None} == set()
    assert _public(module) == set(declared) - lazy
