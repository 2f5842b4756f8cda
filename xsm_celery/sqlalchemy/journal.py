"""``SQLAlchemyWorkflowJournal``: a workflow's transition log in the snapshot store's database.

A workflow step appends the transitions it took to ``xsm_workflow_transitions`` through the
transaction its lock opened, so the log commits or rolls back with the snapshot it explains.
The instance summary the Django admin lists needs no table here: the snapshot row already has
the state, the status and the time of the last update (``Workflow.instances()`` reads it).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from xsm_celery.sqlalchemy.database import DatabaseOwner, SQLAlchemyDatabase, database_of

__all__ = ["TRANSITION_TABLE", "SQLAlchemyWorkflowJournal", "transition_rows"]

#: Name of the table holding the transition log of workflow instances.
TRANSITION_TABLE = "xsm_workflow_transitions"

#: A 64-bit id; SQLite autoincrements only a column declared INTEGER.
_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")

_metadata = sa.MetaData()
transition_table = sa.Table(
    TRANSITION_TABLE,
    _metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("workflow", sa.String(120), nullable=False),
    sa.Column("key", sa.String(255), nullable=False),
    sa.Column("message", sa.String(20), nullable=False),
    sa.Column("event", sa.String(255), nullable=False),
    sa.Column("source", sa.String(500), nullable=False),
    sa.Column("target", sa.String(500), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Index("xsm_workflow_transitions_instance", "workflow", "key", "id"),
)

#: The columns a log row fills, in the order ``transition_rows`` gives them.
COLUMNS = ("workflow", "key", "message", "event", "source", "target", "at")


def transition_rows(transitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Log rows of a step's transitions, cut to the columns' sizes (as the Django log is)."""
    return [
        {
            "workflow": str(t["workflow"])[:120],
            "key": str(t["key"])[:255],
            "message": str(t.get("message") or "")[:20],
            "event": str(t.get("event") or "")[:255],
            "source": ", ".join(t.get("source") or [])[:500],
            "target": ", ".join(t.get("target") or [])[:500],
            "at": float(t["at"]),
        }
        for t in transitions
    ]


class SQLAlchemyWorkflowJournal:
    """The transition log of workflows whose store is a ``SQLAlchemyStore``.

    Args:
        store: The ``SQLAlchemyStore`` (or its database) whose transactions the log joins.
        create_table: Create the table when it is missing.
    """

    table = transition_table

    def __init__(
        self,
        store: DatabaseOwner | SQLAlchemyDatabase | Engine | str | URL,
        *,
        create_table: bool = True,
    ) -> None:
        self.db = database_of(store)
        if create_table:
            self.db.create(transition_table)

    def record(self, summary: dict[str, Any], transitions: list[dict[str, Any]]) -> None:
        """Append the step's transitions (the summary is the snapshot row itself)."""
        if not transitions:
            return
        with self.db.transaction() as conn, self.db.guard("transition log"):
            conn.execute(transition_table.insert(), transition_rows(transitions))

    def recent(self, workflow: str, key: str, limit: int = 50) -> list[dict[str, Any]]:
        """The newest transitions of one instance, newest first."""
        t = transition_table
        query = (
            sa.select(*(t.c[name] for name in COLUMNS))
            .where(t.c.workflow == workflow, t.c.key == key)
            .order_by(t.c.id.desc())
            .limit(max(int(limit), 0))
        )
        with self.db.reading() as conn, self.db.guard("transition log"):
            return [dict(row._mapping) for row in conn.execute(query)]
