"""Plugins and redaction, at the path the specification imports them from.

``from xsm_celery.plugins import register_global, redact`` works as the seeds write it; the
implementation lives in :mod:`xsm_celery.engine.plugins` and :mod:`xsm_celery.engine.redact`.
"""

from __future__ import annotations

from xsm_celery.engine.plugins import (
    InterpreterView,
    LoggingInspector,
    PluginBase,
    clear_global_plugins,
    global_plugins,
    register_global,
    unregister_global,
)
from xsm_celery.engine.redact import (
    DEFAULT_REDACT_KEYS,
    PRIVATE_CONTEXT_PREFIX,
    REDACTED,
    is_private_context_key,
    public_context,
    redact,
)

__all__ = [
    "DEFAULT_REDACT_KEYS",
    "InterpreterView",
    "LoggingInspector",
    "PRIVATE_CONTEXT_PREFIX",
    "PluginBase",
    "REDACTED",
    "clear_global_plugins",
    "global_plugins",
    "is_private_context_key",
    "public_context",
    "redact",
    "register_global",
    "unregister_global",
]
