"""What a dead-lettered task was part of (chain, callbacks, chord), kept for its replay.

A task in ``chain(a, b, c)`` carries the rest of the chain in its message; one with
``link=`` carries its callbacks. A replay that sent only the task's own name and arguments
would silently drop them. The dead letter therefore keeps them (in ``event['payload']
['canvas']``), and the replay sends them again. A chord member cannot be replayed into its
chord (the chord counted it already and its callback was not run), so its replay is refused
with a message that says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xsm_celery.errors import ReplayRefusedError

__all__ = ["CANVAS_KEY", "canvas_of", "replay_options"]

#: Key of ``DeadLetter.event['payload']`` that holds the task's canvas (chain, callbacks).
CANVAS_KEY = "canvas"


def _plain(signature: Any) -> Any:
    return dict(signature) if isinstance(signature, Mapping) else signature


def canvas_of(request: Any) -> dict[str, Any]:
    """The chain, callbacks, errbacks, chord and group of ``request``, only those present."""
    found: dict[str, Any] = {}
    for name in ("chain", "callbacks", "errbacks"):
        value = getattr(request, name, None)
        if value:
            found[name] = [_plain(item) for item in value]
    chord = getattr(request, "chord", None)
    if chord:
        found["chord"] = _plain(chord)
    group = getattr(request, "group", None)
    if group:
        found["group"] = str(group)
    return found


def replay_options(record_id: str, payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``send_task`` options that keep a replayed task's chain and callbacks.

    Raises:
        ReplayRefusedError: the task was a chord member; the message says what is lost.
    """
    workflow = (payload or {}).get(CANVAS_KEY) or {}
    if not isinstance(workflow, Mapping):
        return {}
    chord = workflow.get("chord")
    if chord:
        callback = chord.get("task", "?") if isinstance(chord, Mapping) else "?"
        raise ReplayRefusedError(
            f"dead letter {record_id} was a member of a chord (group {workflow.get('group')}) "
            f"whose callback {callback!r} did not run; a replay cannot rejoin the chord, so "
            "the callback would still never run: run the whole chord again instead"
        )
    options: dict[str, Any] = {}
    if workflow.get("chain"):
        options["chain"] = list(workflow["chain"])
    if workflow.get("callbacks"):
        options["link"] = list(workflow["callbacks"])
    if workflow.get("errbacks"):
        options["link_error"] = list(workflow["errbacks"])
    return options
