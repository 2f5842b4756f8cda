"""The ``xsm_*`` message headers admission reads, read as the untrusted input they are.

Anyone who can publish to the broker writes headers, so none of these decides anything on
its own: a reservation header only points at a record in Redis (``AdmissionRecords``), and
the deferral header is a copy of the history Redis keeps, read only while Redis cannot be
asked, and even then never to dead-letter a task. A value that does not parse or is out of
range is ignored: counted in ``FLEET_COUNTERS`` under ``("header_ignored", header)``,
reported as ``FactKind.HEADER_REJECTED``, and logged once per header and reason in each
process. It is never fatal and never a way past a limit.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xsm_celery.hooks import FactKind, emit

__all__ = [
    "DEFERRAL_HEADER",
    "FLEET_COUNTERS",
    "MAX_CLOCK_SKEW_S",
    "MAX_HEADER_DEFERRALS",
    "RESERVATION_HEADER",
    "DeferralHistory",
    "deferral_history",
    "reservation_claim",
]

logger = logging.getLogger(__name__)

#: The message header that carries the deferral history: first deferral (epoch s) and count.
DEFERRAL_HEADER = "xsm_deferral"

#: The message header naming the rate limit on which Redis holds this task's reserved token.
RESERVATION_HEADER = "xsm_rate_reserved"

#: Counts of what admission did in this process, by (event, option kind or header).
FLEET_COUNTERS: collections.Counter[tuple[str, str]] = collections.Counter()

#: How far in the future a deferral header's first deferral may lie (clocks disagree).
MAX_CLOCK_SKEW_S = 60.0

#: Most deferrals a deferral header may claim; more is not a history any run wrote.
MAX_HEADER_DEFERRALS = 1_000_000

#: Longest limit name a reservation header may carry (a task name and a key digest).
_MAX_NAME_CHARS = 512

_logged: set[tuple[str, str]] = set()
_logged_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class DeferralHistory:
    """When a task was first deferred and how often, as a header claims it (epoch s)."""

    first: float
    count: int


def ignored(header: str, reason: str, task: str, detail: str = "") -> None:
    """Count, report and (once per process per header and reason) log an ignored header."""
    FLEET_COUNTERS[("header_ignored", header)] += 1
    emit(FactKind.HEADER_REJECTED, task=task, reason=f"{header}: {reason}")
    with _logged_lock:
        first_time = (header, reason) not in _logged
        _logged.add((header, reason))
    if first_time:
        logger.warning(
            "task %s: ignoring the %s message header (%s%s); admission asks Redis instead. "
            "Further %s headers ignored for this reason are counted, not logged",
            task,
            header,
            reason,
            f": {detail}" if detail else "",
            header,
        )


def reservation_claim(headers: Mapping[str, Any], task: str) -> str | None:
    """The limit name a reservation header points at, or None (absent or unusable)."""
    raw = headers.get(RESERVATION_HEADER)
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw or len(raw) > _MAX_NAME_CHARS:
        ignored(RESERVATION_HEADER, "not a limit name", task, type(raw).__name__)
        return None
    return raw


def deferral_history(headers: Mapping[str, Any], task: str, now: float) -> DeferralHistory | None:
    """The deferral history a header claims, or None when absent or out of range.

    ``first`` must be a finite time not after ``now`` (plus clock skew) and ``count`` a
    whole number from 0 to :data:`MAX_HEADER_DEFERRALS`.
    """
    raw = headers.get(DEFERRAL_HEADER)
    if raw is None:
        return None
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            ignored(DEFERRAL_HEADER, "not JSON", task)
            return None
    if not isinstance(value, dict):
        ignored(DEFERRAL_HEADER, "not an object", task)
        return None
    first, count = value.get("first"), value.get("count", 0)
    if not isinstance(first, int | float) or not _is_number(first):
        ignored(DEFERRAL_HEADER, "first deferral not a number", task, repr(first)[:40])
        return None
    if not first <= now + MAX_CLOCK_SKEW_S:
        ignored(DEFERRAL_HEADER, "first deferral out of range", task, repr(first)[:40])
        return None
    if isinstance(count, bool) or not isinstance(count, int):
        ignored(DEFERRAL_HEADER, "count not an integer", task, repr(count)[:40])
        return None
    if not 0 <= count <= MAX_HEADER_DEFERRALS:
        ignored(DEFERRAL_HEADER, "count out of range", task, repr(count)[:40])
        return None
    return DeferralHistory(first=float(first), count=count)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
