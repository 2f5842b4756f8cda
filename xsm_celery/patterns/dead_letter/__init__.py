"""Dead letters: the record, the in-memory store, and the plugin that writes them.

``record`` is the ``DeadLetter`` every store and sink keeps unchanged; ``store`` the
in-memory ``DeadLetterStore`` and the checks every store shares; ``plugin`` the
``DeadLetterPlugin`` that writes a record when a machine enters a state tagged
``dead-letter``; ``redaction`` and ``workflow`` what operators' tools read off a record.
"""

from __future__ import annotations

from xsm_celery.patterns.dead_letter.plugin import DEAD_LETTER_TAG, DeadLetterPlugin
from xsm_celery.patterns.dead_letter.record import DeadLetter, DeadLetterReason
from xsm_celery.patterns.dead_letter.store import (
    PURGE_SCAN_LIMIT,
    DeadLetterSink,
    DeadLetterStore,
    DeadLetterStoreProtocol,
    MemoryDeadLetterStore,
    check_cutoff,
    check_limit,
    purge_resolved_older_than,
)

__all__ = [
    "DEAD_LETTER_TAG",
    "PURGE_SCAN_LIMIT",
    "DeadLetter",
    "DeadLetterPlugin",
    "DeadLetterReason",
    "DeadLetterSink",
    "DeadLetterStore",
    "DeadLetterStoreProtocol",
    "MemoryDeadLetterStore",
    "check_cutoff",
    "check_limit",
    "purge_resolved_older_than",
]
