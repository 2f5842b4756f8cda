"""The core imports only the standard library; integrations stay behind their extras."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

THIRD_PARTY = ("celery", "kombu", "django", "sqlalchemy", "redis", "click", "rich", "psycopg")
CORE = ("xsm_celery", "xsm_celery.errors", "xsm_celery.hooks")


def _import_with_blocked(modules: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import importlib, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {THIRD_PARTY!r}:
                    raise ImportError("blocked third-party import: " + name)
                return None
        sys.meta_path.insert(0, Block())
        for name in {modules!r}:
            importlib.import_module(name)
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )


def core_modules() -> tuple[str, ...]:
    """The core packages that exist so far, so the test grows with the package."""
    import importlib.util

    names = list(CORE)
    for sub in ("engine", "patterns", "persistence", "eda", "plugins", "charttools", "actions"):
        name = f"xsm_celery.{sub}"
        if importlib.util.find_spec(name) is not None:
            names.append(name)
    return tuple(names)


def test_core_imports_without_third_party_packages() -> None:
    """Importing the core with every third-party package blocked succeeds."""
    result = _import_with_blocked(core_modules())
    assert result.returncode == 0, result.stderr


def test_blocking_really_blocks() -> None:
    """The blocker itself works: importing an integration package fails under it."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "class B:\n"
            "    def find_spec(self, n, p=None, t=None):\n"
            "        if n.split('.')[0] == 'kombu': raise ImportError(n)\n"
            "sys.meta_path.insert(0, B())\n"
            "import kombu\n",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0


@pytest.mark.parametrize("name", ["XsmError", "XStateMachineError"])
def test_error_base_is_exported(name: str) -> None:
    """Both names of the error base import from the top level and are one class."""
    import xsm_celery

    assert getattr(xsm_celery, name) is xsm_celery.errors.XsmError
