"""What every Django store shares: the database alias, read lazily, and a wall clock."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["DjangoStoreBase"]


class DjangoStoreBase:
    """Holds the database alias (``XSM_CELERY["DATABASE"]`` when None) and the clock.

    The alias is resolved on each use rather than in ``__init__``, so a store built at import
    time (a module-level ``DjangoDeadLetterStore()``) follows settings changed later.
    """

    def __init__(self, using: str | None = None, *, wall: Callable[[], float] = time.time) -> None:
        self._using = using
        self._wall = wall

    @property
    def using(self) -> str:
        """The database alias this store reads and writes."""
        if self._using is not None:
            return self._using
        from xsm_celery.django.conf import get_settings

        return get_settings().database

    def __repr__(self) -> str:
        return f"{type(self).__name__}(using={self._using!r})"
