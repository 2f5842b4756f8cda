"""Where every dead letter of a workflow goes: the spool, the store, and the facts.

A step's message that gave up (``task``), a dead-letter state an instance entered (a saga's
``compensationFailed``, stored by the ``step`` once it committed): both are written here,
so each waits in the local spool while the store is down and each is reported as a chart
task's dead letter is (the log line, ``xsm_dead_letters_total``, the Celery event).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from xsm_celery.celery.deadletter.spool import DeadLetterSpool
from xsm_celery.celery.stores import stores_for
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns import DeadLetter

if TYPE_CHECKING:
    from xsm_celery.celery.workflow.context import StepContext

__all__ = ["workflow_dead_letter"]

logger = logging.getLogger("xsm_celery.workflow")


def workflow_dead_letter(ctx: StepContext, letter: DeadLetter, *, key: str) -> None:
    """Keep ``letter`` in the spool, write it to the dead-letter store, and report it.

    Every workflow dead letter (a step's, a compensation's) goes through here, so each is
    stored the same way and emits the same log line, metric and Celery event as a chart
    task's.
    """
    stores = stores_for(ctx.app)
    spool = DeadLetterSpool(stores.settings.dead_letter_spool)
    spool.keep(letter)
    facts = {
        "source": "workflow",
        "reason": letter.reason,
        "task": letter.task_name or "",
        "task_id": letter.task_id or "",
        "workflow": ctx.name,
    }
    try:
        store = stores.dead_letters()
        spool.write_through(store, letter)
    except Exception:
        logger.warning(
            "dead-letter store failed; the dead letter %s of workflow %s[%s] is kept "
            "in the spool %s and written when the store is back",
            letter.id,
            ctx.name,
            key,
            spool.directory,
            exc_info=True,
        )
        emit(FactKind.DEAD_LETTER_WRITTEN, stored=False, **facts)
        emit(FactKind.DEAD_LETTER_SPOOLED, task=letter.task_name or "", reason=letter.reason)
        return
    emit(FactKind.DEAD_LETTER_WRITTEN, stored=True, **facts)
    spool.flush(store)
