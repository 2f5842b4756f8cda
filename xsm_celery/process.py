"""This process's id, read once and again in each forked child.

Several caches must not cross a fork (store connections, the relay, the Celery-events
dispatcher, ``prometheus_client``'s per-process metric files), so they compare the process
id on each use, and some of those uses are on every task's path. ``os.getpid()`` is a
system call, and in a busy worker a system call is where the scheduler hands the CPU to
Redis: py-spy showed one in ``stores_for`` costing a chart task as much as sending its
attempt marker. The id is kept here instead and refreshed by a fork hook, which runs in
every child ``os.fork()`` makes (Celery's prefork pool, ``multiprocessing``).
"""

from __future__ import annotations

import os

__all__ = ["current_pid"]

_pid = os.getpid()


def current_pid() -> int:
    """The id of the running process, without a system call."""
    return _pid


def _after_fork_in_child() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):  # a platform without fork keeps one id for ever
    os.register_at_fork(after_in_child=_after_fork_in_child)
