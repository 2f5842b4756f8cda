"""xsm_celery: resilient Celery work driven by small statecharts.

The top level re-exports the statechart engine and the error tree; the resilience patterns
live in ``xsm_celery.patterns``, event-driven plumbing in ``xsm_celery.eda``, stores in
``xsm_celery.persistence`` and the integrations in ``xsm_celery.celery``, ``.kombu``,
``.sqlalchemy``, ``.django`` and ``.redis``.
"""

from __future__ import annotations

from xsm_celery.errors import (
    InterpreterStoppedError,
    MissingExtraError,
    RunawayChainError,
    XsmError,
    XStateMachineError,
)

__all__ = [
    # Errors
    "InterpreterStoppedError",
    "MissingExtraError",
    "RunawayChainError",
    "XStateMachineError",
    "XsmError",
]

__version__ = "0.1.0"
