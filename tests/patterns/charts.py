"""Charts shared by the pattern tests (the seed's retry loop and variations of it)."""

from __future__ import annotations

import copy
from typing import Any

RETRY_CFG: dict[str, Any] = {
    "id": "job",
    "initial": "attempting",
    "context": {"attempt": 0},
    "states": {
        "attempting": {
            "invoke": {
                "src": "work",
                "onDone": {"target": "done", "actions": "retryReset"},
                "onError": {"target": "retrying", "actions": "retryBump"},
            },
        },
        "retrying": {
            "after": {
                "retryDelay": [
                    {"guard": "retryCanRetry", "target": "attempting"},
                    {"target": "deadLettered"},
                ],
            },
        },
        "done": {"type": "final"},
        "deadLettered": {"type": "final", "tags": ["dead-letter"]},
    },
}


def retry_chart(**context: Any) -> dict[str, Any]:
    """A fresh copy of the seed's retry chart with extra context keys."""
    chart = copy.deepcopy(RETRY_CFG)
    chart["context"].update(context)
    return chart


def cycling_chart() -> dict[str, Any]:
    """The retry loop whose end states are not final: AGAIN starts a new episode."""
    chart = retry_chart()
    chart["states"]["done"] = {"on": {"AGAIN": "attempting"}}
    chart["states"]["deadLettered"] = {"tags": ["dead-letter"], "on": {"AGAIN": "attempting"}}
    return chart
