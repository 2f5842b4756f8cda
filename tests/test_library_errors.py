"""Errors the package raises on purpose are library errors, so ``except XsmError`` sees them."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from xsm_celery.errors import ArgumentTypeError, ConfigurationError, XsmError

PACKAGE = Path(__file__).resolve().parent.parent / "xsm_celery"

#: Built-in exception classes, which a deliberate ``raise`` must not construct directly.
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}
#: Still raised on purpose: Python asks for these exact classes (attribute lookup, iteration,
#: a CLI exit status, an unreachable branch).
PROTOCOL_ERRORS = {
    "AttributeError",
    "StopIteration",
    "StopAsyncIteration",
    "SystemExit",
    "AssertionError",
}


def _builtin_raises(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            func = node.exc.func
            name = func.id if isinstance(func, ast.Name) else None
            if name in BUILTIN_ERRORS - PROTOCOL_ERRORS:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} raise {name}")
    return found


def test_no_module_raises_a_builtin_exception_on_purpose() -> None:
    """Every ``raise X(...)`` in the package constructs an XsmError subclass."""
    offenders = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _builtin_raises(path)]
    assert offenders == []


def test_configuration_errors_keep_the_builtin_they_replace() -> None:
    """A bad value is still a ValueError and a bad type still a TypeError for old callers."""
    from xsm_celery.patterns import RetryPolicy

    with pytest.raises(ValueError, match="max_attempts") as bad_value:
        RetryPolicy(max_attempts=0)
    assert isinstance(bad_value.value, ConfigurationError)
    with pytest.raises(TypeError, match="rng") as bad_type:
        RetryPolicy(rng=42)  # type: ignore[arg-type]
    assert isinstance(bad_type.value, ArgumentTypeError)
    assert isinstance(bad_type.value, XsmError)
