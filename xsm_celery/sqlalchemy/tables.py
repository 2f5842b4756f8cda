"""The dead-letter tables (one row per record, one row per operator action), and table names
that more than one module writes.

A dead-letter record is kept whole as JSON in ``body`` so that fields added to ``DeadLetter``
later need no migration; the columns beside it copy the fields that operators filter on
(reason, machine, task, resolution, age), each indexed.
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = [
    "AUDIT_TABLE",
    "DEAD_LETTER_TABLE",
    "SNAPSHOT_TABLE",
    "audit_table",
    "dead_letter_table",
    "metadata",
]

#: Name of the table holding snapshots (the same shape as ``SQLiteStore``'s); the snapshot
#: store defines it, and the PostgreSQL workflow session writes it in hand-written SQL.
SNAPSHOT_TABLE = "xsm_snapshots"

#: Name of the table that holds dead-letter records.
DEAD_LETTER_TABLE = "xsm_dead_letters"

#: Name of the table that holds the operator audit trail (replay, resolve, purge).
AUDIT_TABLE = "xsm_dead_letter_audit"

metadata = sa.MetaData()

dead_letter_table = sa.Table(
    DEAD_LETTER_TABLE,
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("taken_at", sa.Float, nullable=False, index=True),
    sa.Column("reason", sa.String(32), nullable=False, index=True),
    sa.Column("machine_id", sa.String(255), nullable=False, index=True),
    sa.Column("state_id", sa.String(255), nullable=False),
    sa.Column("task_name", sa.String(255), nullable=True, index=True),
    sa.Column("task_id", sa.String(255), nullable=True, index=True),
    sa.Column("topic", sa.String(255), nullable=True),
    sa.Column("resolved_at", sa.Float, nullable=True, index=True),
    sa.Column("body", sa.JSON, nullable=False),
)

audit_table = sa.Table(
    AUDIT_TABLE,
    metadata,
    sa.Column("seq", sa.Integer, sa.Identity(), primary_key=True),
    sa.Column("record_id", sa.String(64), nullable=False, index=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
)
