"""Durable workflows on Celery: a user's chart as one persisted instance per business key.

The package's modules, each with one job:

* ``api``: ``Workflow``, what users call (``start``, ``send``, ``send_now``, ``get``...);
* ``context``: ``StepContext``, the frozen view of a workflow the machinery below reads;
* ``checks``: what a producer may send (names, keys, event ids, payload depth);
* ``messages``: the data that travels (a step's ``Message``, a task step's ``Dispatch``);
* ``step``: one step in one transaction (lock, inbox, load, apply, save);
* ``session``: the transaction a step runs in, per store;
* ``payloads``: the messages a step sends (timers, task steps, completions), built once;
* ``task``: the Celery task that runs steps, with retries, deferrals and dead letters;
* ``dead_letters``: where every dead letter of a workflow is written and reported;
* ``ledger``: a step's counted failures and lost runs, kept in the store, not in messages;
* ``lost``: lost runs (a worker that died mid-step) told apart by attempt markers;
* ``recovery``: the Beat scan that re-publishes overdue timers and lost task steps;
* ``replay``: a dead letter of a task step sent again through its instance;
* ``service``: ``celery_service``, a Celery task as an ``invoke`` step;
* ``stores``: the stores a workflow writes, opened from its ``store=`` setting;
* ``view``: ``WorkflowView``, an instance as stored.
"""

from __future__ import annotations

from xsm_celery.celery.workflow.api import (
    DEFAULT_INBOX_TTL_S,
    WORKFLOW_STORE_SETTING,
    WORKFLOW_TASK_PREFIX,
    Workflow,
    find_workflow,
    workflow_named,
    workflows_of,
)

__all__ = [
    "DEFAULT_INBOX_TTL_S",
    "WORKFLOW_STORE_SETTING",
    "WORKFLOW_TASK_PREFIX",
    "Workflow",
    "find_workflow",
    "workflow_named",
    "workflows_of",
]
