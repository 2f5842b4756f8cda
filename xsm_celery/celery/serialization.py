"""Refuse a pickle configuration for tasks that carry a chart snapshot.

A chart task's message carries its snapshot (attempt counter, error chain) and is read back
by whichever worker runs the retry. With pickle, a message is code the worker executes on
load; with JSON it is data. The check runs when the task is bound to its app (worker start,
or first use in a producer), so a bad configuration fails before any message is sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xsm_celery.errors import ConfigurationError

__all__ = ["UNSAFE_CONTENT", "require_json"]

#: Serializer names and content types that execute code when a message is loaded.
UNSAFE_CONTENT = frozenset({"pickle", "application/x-python-serialize"})

_FIX = "set app.conf.task_serializer = 'json' and app.conf.accept_content = ['json']"


def require_json(conf: Any, *, task_name: str, task_serializer: str | None = None) -> None:
    """Raise unless tasks are serialised as JSON and pickle is not accepted.

    Args:
        conf: The app's configuration (``app.conf``).
        task_name: The chart task being checked, named in the error.
        task_serializer: The task's own ``serializer`` option, which overrides the app's.

    Raises:
        ConfigurationError: the serializer is not JSON, or ``accept_content`` allows pickle.
    """
    serializer = task_serializer or conf.get("task_serializer") or "json"
    if serializer != "json":
        raise ConfigurationError(
            f"chart task {task_name!r} carries its chart snapshot in the message and accepts "
            f"only JSON, but its serializer is {serializer!r}; {_FIX}"
        )
    unsafe = _unsafe(conf.get("accept_content"))
    if unsafe:
        raise ConfigurationError(
            f"chart task {task_name!r} refuses to run on a worker that accepts "
            f"{', '.join(unsafe)} messages (app.conf.accept_content); {_FIX}"
        )


def _unsafe(values: Iterable[str] | None) -> list[str]:
    return sorted({str(v) for v in values or ()} & UNSAFE_CONTENT)
