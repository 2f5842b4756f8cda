"""Run a command's unit of work once, N times, or until interrupted, with a pause between."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["repeat"]


def repeat(
    work: Callable[[], None],
    *,
    runs: int,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Call ``work`` ``runs`` times (forever when 0), sleeping ``interval_s`` between calls.

    Returns how many times it ran; Ctrl-C ends a forever loop cleanly.
    """
    done = 0
    try:
        while runs == 0 or done < runs:
            work()
            done += 1
            if runs == 0 or done < runs:
                sleep(interval_s)
    except KeyboardInterrupt:
        pass
    return done
