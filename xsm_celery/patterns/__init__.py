"""Resilience patterns as small statecharts: retry with backoff, dead letters, breakers.

Each pattern is a chart plus a little logic, so it runs on the same engine as the user's
own machines, persists with them and renders in the same diagrams.
"""

from __future__ import annotations

from xsm_celery.errors import CircuitOpenError
from xsm_celery.patterns.dead_letter import DeadLetter, DeadLetterReason, DeadLetterStore
from xsm_celery.patterns.error_chain import ERRORS_CONTEXT_KEY
from xsm_celery.patterns.jitter import Jitter
from xsm_celery.patterns.retry import RetryPolicy

__all__ = [
    # Retry
    "Jitter",
    "RetryPolicy",
    # Dead letters
    "DeadLetter",
    "DeadLetterReason",
    "DeadLetterStore",
    "ERRORS_CONTEXT_KEY",
    # Circuit breaker
    "CircuitOpenError",
]
