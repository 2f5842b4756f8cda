"""The demo: ``python -m xsm_celery.demo`` (or ``make demo``).

A real Celery worker on an embedded SQLite broker, a flaky upstream, chart-driven retries
shown live, the dead letters as an operator sees them, and one replay. See ``runner.py``.
"""

from __future__ import annotations

__all__: list[str] = []
