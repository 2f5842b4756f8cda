"""A settable wall clock for store tests, so leases and expiry need no sleeping."""

from __future__ import annotations


class Wall:
    """Epoch seconds that only move when the test moves them."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += seconds
