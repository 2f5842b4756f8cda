"""Every package of xsm_celery lists exactly its public names in ``__all__``."""

from __future__ import annotations

import importlib
import types
from pathlib import Path

import pytest

import xsm_celery

_ROOT = Path(xsm_celery.__file__).parent

#: Every package, found on disk (importing ``xsm_celery.django.admin`` needs Django's settings,
#: so the list is not built by importing); one that needs a missing extra is skipped.
PACKAGES = sorted(
    ".".join(("xsm_celery", *init.parent.relative_to(_ROOT).parts))
    for init in _ROOT.rglob("__init__.py")
    if init.parent.name != "migrations"
)


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
    if name.startswith("xsm_celery.django"):
        # The Django app's packages import its models: the tests' Django project sets up first.
        importlib.import_module("tests.django.conftest")
        from django.apps import apps

        if not apps.is_installed("xsm_celery.django"):
            pytest.skip("Django was set up by another test without the app (run with tests/django)")
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        pytest.skip(f"{name} needs an extra that is not installed: {exc}")
    declared = list(getattr(module, "__all__", ()))
    assert len(declared) == len(set(declared)), "a name is listed twice"
    lazy = {n for n in declared if n not in vars(module)}
    assert {n for n in lazy if getattr(module, n, None) is None} == set()
    assert _public(module) == set(declared) - lazy
