"""The kombu and redis integrations refuse to load without their extras, naming them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _import_without(blocked: str, module: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == {blocked!r}:
                    raise ImportError("blocked: " + name)
                return None
        sys.meta_path.insert(0, Block())
        from xsm_celery.errors import MissingExtraError
        try:
            import {module}
        except MissingExtraError as exc:
            print(exc.extra, exc.module, isinstance(exc, ImportError))
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


@pytest.mark.parametrize(
    ("blocked", "module", "extra"),
    [("kombu", "xsm_celery.kombu", "celery"), ("redis", "xsm_celery.redis", "redis")],
)
def test_missing_extra_names_the_pip_extra(blocked: str, module: str, extra: str) -> None:
    """Without the package, importing the integration raises MissingExtraError (an ImportError)."""
    result = _import_without(blocked, module)
    assert result.stdout.split() == [extra, blocked, "True"]
