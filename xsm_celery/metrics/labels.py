"""Bounded label values: what a fact field may become in a metric label.

Only a few named fields of a fact are ever read as labels (task, exception, reason, outcome,
topic, breaker, limit, workflow, state), never an argument or a context value. Even those
come partly from the outside (a producer chooses an envelope's topic, a user chooses a
task name), so every value is cut to a safe alphabet and length, and each metric accepts at
most ``MAX_SERIES`` distinct label sets: later ones are counted under ``"other"``. A
misbehaving producer can then cost a scrape a little, never the Prometheus server a lot.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence

__all__ = ["MAX_LABEL_LENGTH", "MAX_SERIES", "OTHER", "LabelGuard", "field_of", "label_value"]

#: Longest label value kept; longer ones become ``OTHER``.
MAX_LABEL_LENGTH = 120
#: Distinct label sets one metric accepts before new ones are folded into ``OTHER``.
MAX_SERIES = 500
#: The value a refused label takes.
OTHER = "other"

_SAFE = re.compile(r"[A-Za-z0-9_.:/\-]*")


def label_value(value: object) -> str:
    """``value`` as a label: ``""`` for None, ``OTHER`` for anything long or unusual."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = value.value if hasattr(value, "value") and isinstance(value.value, str) else value
    text = str(text)
    if len(text) > MAX_LABEL_LENGTH or not _SAFE.fullmatch(text):
        return OTHER
    return text


def field_of(fields: Mapping[str, object], *names: str) -> object:
    """The first of ``names`` present (and not None) in ``fields``.

    Facts come from several parts of the package; where two spell a field differently
    (``breaker`` and ``name``), the exporter reads both rather than dropping the fact.
    """
    for name in names:
        value = fields.get(name)
        if value is not None:
            return value
    return None


class LabelGuard:
    """Remembers the label sets one metric has used and folds the excess into ``OTHER``."""

    def __init__(self, limit: int = MAX_SERIES) -> None:
        self._limit = limit
        self._seen: set[tuple[str, ...]] = set()
        self._lock = threading.Lock()

    def admit(self, values: Sequence[object]) -> tuple[str, ...]:
        """The label values to use for ``values``: themselves, or all ``OTHER`` when full."""
        labels = tuple(label_value(v) for v in values)
        if labels in self._seen:
            return labels
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(labels)
                return labels
        return tuple(OTHER for _ in labels)
