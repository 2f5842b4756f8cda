"""Range leases for the SQLite outbox: one row per claimed run, not a write per claimed row.

A relay's claim used to stamp ``claimed_by`` and ``claimed_until`` on every row it took,
and SQLite then rewrote (and committed, and checkpointed) every page of the batch once
for the claim and again for the mark: half of the outbox's cost per row. A lease is now a
row of ``xsm_outbox_lease``: an owner, the first and last sequence numbers of a run of
rows it took, and when the lease ends. A claim writes one such row per run, so leasing a
batch of any size is one small write.

The rules that keep two relays apart:

* A pending row is held by another owner when a live range of that owner covers it, or
  when its own ``claimed_by`` / ``claimed_until`` (written by versions before range
  leases) name that owner and have not run out.
* A claim's runs never span a row held by another owner: the run is cut there, so two
  owners' live ranges never cover the same pending row.
* Handing rows back (a release, a counted refusal, a requeue) cuts their sequence numbers
  out of the ranges, and so does another owner taking them once the lease ran out; a
  range that covers no pending row any more (its rows were sent) is deleted.

Every function here runs inside the caller's write transaction.
"""

from __future__ import annotations

import sqlite3
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence

__all__ = [
    "IN_LIST_CHUNK",
    "LEASE_SCHEMA",
    "PENDING",
    "claim_runs",
    "cut",
    "drop_spent",
    "held_by",
    "in_lists",
]

LEASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS xsm_outbox_lease (
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    owner VARCHAR(128) NOT NULL,
    leased_until REAL NOT NULL
)
"""
#: What a row must be for a relay to see it: not sent, not set aside as failed (one home,
#: shared with the store; unqualified, so it reads the outbox row in every query here).
PENDING = "sent_at IS NULL AND failed_at IS NULL"
#: Pending rows in order, each with its envelope text, or NULL when another owner holds it.
_CANDIDATES = f"""
SELECT o.seq, o.topic, o.claimed_by, CASE WHEN
    (o.claimed_until > :now AND o.claimed_by != :owner)
    OR EXISTS (SELECT 1 FROM xsm_outbox_lease l WHERE l.leased_until > :now
               AND l.owner != :owner AND o.seq BETWEEN l.first_seq AND l.last_seq)
  THEN NULL ELSE o.envelope END
FROM xsm_outbox o WHERE {PENDING} ORDER BY o.seq
"""
#: Whether ``owner`` holds the row: one of its ranges covers it, or its own columns say so.
_HELD_BY = """(o.claimed_by = ? OR EXISTS (SELECT 1 FROM xsm_outbox_lease l
    WHERE l.owner = ? AND o.seq BETWEEN l.first_seq AND l.last_seq))"""
_INSERT = (
    "INSERT INTO xsm_outbox_lease (first_seq, last_seq, owner, leased_until) VALUES (?, ?, ?, ?)"
)
#: Sequence numbers per ``IN (...)`` list: well under SQLite's bound-parameter limit.
IN_LIST_CHUNK = 500


def in_lists(seqs: Sequence[int]) -> Iterator[tuple[Sequence[int], str]]:
    """``seqs`` in parts of at most ``IN_LIST_CHUNK``, each with its ``?,?,...`` marks."""
    for start in range(0, len(seqs), IN_LIST_CHUNK):
        part = seqs[start : start + IN_LIST_CHUNK]
        yield part, ",".join("?" * len(part))


def claim_runs(
    conn: sqlite3.Connection, limit: int, owner: str, now: float, until: float
) -> list[tuple[int, str, str]]:
    """Lease up to ``limit`` pending rows free for ``owner``; return (seq, topic, text) rows.

    Rows held by another owner are skipped and end the current run, so the ranges written
    cover only rows this owner took (and rows that are not pending). The rows taken are
    first cut out of every range that covered them: a row taken from an owner whose lease
    ran out stops being that owner's (a stamp in its own columns is cleared too), so its
    release or refusal of it counts nothing, and a row this owner takes again gets the
    new lease only, as with a store that stamps each row.
    """
    if limit <= 0:
        return []
    rows: list[tuple[int, str, str]] = []
    runs: list[tuple[int, int, str, float]] = []
    stamped: list[int] = []
    first: int | None = None
    last = 0
    cursor = conn.execute(_CANDIDATES, {"now": now, "owner": owner})
    try:
        for seq, topic, claimed_by, text in cursor:
            if text is None:
                if first is not None:
                    runs.append((first, last, owner, until))
                    first = None
                continue
            rows.append((seq, topic, text))
            if claimed_by is not None:
                stamped.append(seq)
            if first is None:
                first = seq
            last = seq
            if len(rows) >= limit:
                break
    finally:
        cursor.close()
    if first is not None:
        runs.append((first, last, owner, until))
    if rows:
        cut(conn, [row[0] for row in rows])
    for part, marks in in_lists(stamped):
        conn.execute(
            f"UPDATE xsm_outbox SET claimed_by = NULL, claimed_until = NULL WHERE seq IN ({marks})",
            part,
        )
    conn.executemany(_INSERT, runs)
    return rows


def held_by(conn: sqlite3.Connection, seqs: Sequence[int], owner: str) -> list[int]:
    """The pending rows among ``seqs`` that ``owner`` holds, live lease or run out."""
    held: list[int] = []
    for part, marks in in_lists(seqs):
        held.extend(
            seq
            for (seq,) in conn.execute(
                f"SELECT o.seq FROM xsm_outbox o WHERE o.seq IN ({marks}) AND {PENDING} "
                f"AND {_HELD_BY}",
                (*part, owner, owner),
            )
        )
    return held


def cut(conn: sqlite3.Connection, seqs: Sequence[int], owner: str | None = None) -> None:
    """Take ``seqs`` out of the ranges covering them (only ``owner``'s, when given)."""
    if not seqs:
        return
    sql = (
        "SELECT rowid, first_seq, last_seq, owner, leased_until FROM xsm_outbox_lease "
        "WHERE last_seq >= ? AND first_seq <= ?"
    )
    params: tuple[object, ...] = (min(seqs), max(seqs))
    if owner is not None:
        sql, params = sql + " AND owner = ?", (*params, owner)
    found = conn.execute(sql, params).fetchall()
    if not found:
        return
    wanted = sorted(set(seqs))
    doomed: list[tuple[int]] = []
    pieces: list[tuple[int, int, str, float]] = []
    low, high = wanted[0], wanted[-1]
    for rowid, first, last, who, until in found:
        inside = wanted[bisect_left(wanted, first) : bisect_right(wanted, last)]
        if not inside:
            continue
        doomed.append((rowid,))
        low, high = min(low, first), max(high, last)
        start = first
        for seq in inside:
            if start < seq:
                pieces.append((start, seq - 1, who, until))
            start = seq + 1
        if start <= last:
            pieces.append((start, last, who, until))
    if doomed:
        conn.executemany("DELETE FROM xsm_outbox_lease WHERE rowid = ?", doomed)
        conn.executemany(_INSERT, pieces)
        drop_spent(conn, low, high)


def drop_spent(conn: sqlite3.Connection, low: int, high: int) -> None:
    """Delete the ranges overlapping ``low..high`` that cover no pending row any more."""
    conn.execute(
        "DELETE FROM xsm_outbox_lease WHERE last_seq >= ? AND first_seq <= ? AND NOT EXISTS "
        "(SELECT 1 FROM xsm_outbox o WHERE o.seq BETWEEN xsm_outbox_lease.first_seq "
        f"AND xsm_outbox_lease.last_seq AND {PENDING})",
        (low, high),
    )
