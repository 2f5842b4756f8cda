"""Django-backed stores implementing the same protocols as the memory and SQLAlchemy ones.

Every store takes an optional database alias (``using``); without one it uses
``XSM_CELERY["DATABASE"]``. Each one can be built with no arguments, which is what a Celery
setting such as ``xsm_dead_letter_store = "django"`` needs.
"""

from __future__ import annotations

from xsm_celery.django._dead_letter_store import DjangoDeadLetterStore

__all__ = ["DjangoDeadLetterStore"]
