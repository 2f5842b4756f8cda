"""Running an action list: each action in order, the first that raises ends the list.

An action that raises is contained: the error is logged, reported to the plugins'
``on_action_error`` and returned, so the step records it (``last_error``, the receipt's
``error``) and carries on with the transition. That is how a dead-letter plugin builds its
error chain from failures the machine survived.

An ``async def`` action returns an awaitable: the async interpreter runs it as a task (the
step does not wait for it, so run-to-completion holds) and reports its failure the same way;
the sync interpreter refuses it as a failed action.
"""

from __future__ import annotations

import inspect
import logging
import traceback
from typing import TYPE_CHECKING

from xsm_celery.engine.plugins import dispatch
from xsm_celery.engine.redact import mask_text, secret_values
from xsm_celery.errors import ImplementationMissingError

if TYPE_CHECKING:
    from xsm_celery.engine.chart import ActionDef
    from xsm_celery.engine.events import Event
    from xsm_celery.engine.runtime import Core

__all__ = ["run_actions"]

logger = logging.getLogger("xsm_celery.engine")


def run_actions(core: Core, actions: tuple[ActionDef, ...], event: Event) -> Exception | None:
    """Run ``actions`` in order; returns the error that ended the list, or None."""
    ctx = core._context
    plugins = core._plugins
    action = actions[0]
    try:
        for action in actions:
            if plugins:
                dispatch(core, plugins, "on_action_execute", (action,))
            outcome = action.fn(core, ctx, event, action)  # type: ignore[misc]
            if outcome is not None and inspect.isawaitable(outcome):
                core._start_async_action(action, outcome, event)
    except Exception as exc:
        return action_failed(core, action, exc, event)
    return None


def action_failed(core: Core, action: ActionDef, exc: Exception, event: Event) -> Exception:
    """Log and report a failed action; returns the error to record."""
    error: Exception = exc
    if action.fn is None:
        error = ImplementationMissingError("action", action.type, path=action.path)
    # The message is masked (a secret of the event or the context echoed in it, or a token
    # shape), and the traceback's frames follow without the unmasked message.
    secrets = secret_values([getattr(event, "payload", None), getattr(core, "context", None)])
    logger.error(
        "machine %r: action %r raised on event %r; rest of its list skipped: %s\n%s",
        core.machine.id,
        action.type,
        event.type,
        mask_text(f"{type(error).__name__}: {error}", secrets),
        "".join(traceback.format_tb(error.__traceback__)).rstrip(),
    )
    if core._plugins:
        dispatch(core, core._plugins, "on_action_error", (action, error))
    return error
