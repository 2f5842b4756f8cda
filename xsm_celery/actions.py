"""The built-in action creators, at the path 0.11.0's users import them from.

``from xsm_celery.actions import assign, raise_`` works as ``xstate_statemachine.actions``
does; the implementation lives in :mod:`xsm_celery.engine.actions`.
"""

from __future__ import annotations

from xsm_celery.engine.actions import (
    ActionEnqueuer,
    assign,
    cancel,
    choose,
    emit,
    enqueue_actions,
    escalate,
    forward_to,
    log,
    pure,
    raise_,
    send_parent,
    send_to,
    spawn_child,
    stop_child,
)

__all__ = [
    "ActionEnqueuer",
    "assign",
    "cancel",
    "choose",
    "emit",
    "enqueue_actions",
    "escalate",
    "forward_to",
    "log",
    "pure",
    "raise_",
    "send_parent",
    "send_to",
    "spawn_child",
    "stop_child",
]
