"""``persisted()``: load an instance, act on it, save it, discard it, as one ``with`` block.

In production an interpreter lives for one request or one delivery: it is rebuilt from its
snapshot, receives its event, is saved, and is thrown away. The block saves only when it
exits cleanly; an exception inside it writes nothing.

Plugins take part in the save through three optional hooks, so work that must agree with
the saved state happens at the right moment:

* ``on_before_save(interp)``: before anything is written; raising refuses the save;
* ``on_persist(interp, store)``: inside the save's transaction, right after the snapshot is
  written (outbox rows, inbox receipts: they commit or roll back with it);
* ``on_commit(interp)``: after the block, its lock and its transaction exited cleanly (a
  direct broker publish: a rolled-back state is never announced);
* ``on_rollback(interp)``: nothing was saved (buffered work is dropped).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from xsm_celery.engine import Machine, SyncInterpreter
from xsm_celery.engine.clock import Clock
from xsm_celery.errors import StoreError
from xsm_celery.persistence.protocols import LockStrategy, StateStore

__all__ = ["is_persisted", "load_interpreter", "persisted", "save_interpreter"]

logger = logging.getLogger("xsm_celery.persistence")

_managed: weakref.WeakSet[Any] = weakref.WeakSet()


def is_persisted(interp: Any) -> bool:
    """Tell whether ``interp`` is inside a ``persisted()`` block (its plugins' writes wait)."""
    return interp in _managed


def _call_hooks(plugins: Iterable[Any], hook: str, *args: Any) -> None:
    for plugin in plugins:
        method = getattr(plugin, hook, None)
        if method is not None:
            method(*args)


def _quiet_hooks(plugins: Iterable[Any], hook: str, *args: Any) -> None:
    """Run a clean-up hook on every plugin; one failing is logged, the others still run."""
    for plugin in plugins:
        method = getattr(plugin, hook, None)
        if method is None:
            continue
        try:
            method(*args)
        except Exception:
            logger.exception("plugin %r failed in %s", plugin, hook)


def load_interpreter(
    store: StateStore,
    key: str,
    machine: Machine,
    *,
    clock: Clock | None = None,
    plugins: Iterable[Any] = (),
    create: bool = True,
    verify_machine_hash: bool = True,
    expected_machine_hash: str | None = None,
) -> tuple[SyncInterpreter, int]:
    """Return the running interpreter of ``key`` and the version it was loaded at (0: new).

    A restored interpreter fires its overdue ``after`` timers at once.
    """
    record = store.load(key)
    if record is None:
        if not create:
            raise StoreError(f"no stored instance {key!r}; pass create=True to start one")
        interp = SyncInterpreter(machine, clock)
        for plugin in plugins:
            interp.use(plugin)
        interp.store_key = key
        interp.start()
        return interp, 0
    interp = SyncInterpreter.from_snapshot(
        record.snapshot,
        machine,
        clock,
        verify_machine_hash=verify_machine_hash,
        expected_machine_hash=expected_machine_hash,
        plugins=plugins,
    )
    interp.store_key = key
    interp.tick()
    return interp, int(record.version)


def save_interpreter(
    store: StateStore,
    key: str,
    interp: SyncInterpreter,
    *,
    expected_version: int | None,
    plugins: Iterable[Any] = (),
    before_commit: Iterable[Callable[[Any], Any]] = (),
) -> int:
    """Save ``interp``'s snapshot and run the ``on_persist`` hooks in one transaction."""
    _call_hooks(plugins, "on_before_save", interp)
    snapshot = interp.get_snapshot()
    version = interp.machine.version
    transaction = getattr(store, "transaction", None)
    scope = transaction() if transaction is not None else contextlib.nullcontext()
    with scope:
        new_version = int(
            store.save(
                key,
                snapshot,
                expected_version=expected_version,
                machine_version="" if version is None else str(version),
            )
        )
        _call_hooks(plugins, "on_persist", interp, store)
        for callback in before_commit:
            callback(interp)
    return new_version


@contextlib.contextmanager
def persisted(
    store: StateStore,
    key: str,
    machine: Machine,
    *,
    lock: LockStrategy | None = None,
    clock: Clock | None = None,
    plugins: Iterable[Any] = (),
    create: bool = True,
    verify_machine_hash: bool = True,
    expected_machine_hash: str | None = None,
    before_commit: Iterable[Callable[[Any], Any]] = (),
) -> Iterator[SyncInterpreter]:
    """Yield the running interpreter of ``key``; save it when the block exits cleanly.

    Without a ``lock`` the block is optimistic, as under ``OptimisticLock``: nothing is held
    and a concurrent writer makes the exit raise ``ConflictError`` (a block cannot be re-run:
    use ``lock.run`` to retry). Under ``PessimisticLock`` the store's lock (its transaction,
    on SQL stores) is held for the whole block. The interpreter is stopped either way.

    Args:
        store: A ``StateStore``.
        key: The instance key.
        machine: The chart the instance runs.
        lock: ``OptimisticLock()`` (what ``None`` means) or ``PessimisticLock()``.
        clock: The interpreter's clock (tests pass a ``SimulatedClock``).
        plugins: Plugins attached before anything runs.
        create: Start a fresh instance when ``key`` is unknown; otherwise ``StoreError``.
        verify_machine_hash: False restores a snapshot taken from a changed chart.
        expected_machine_hash: Also accept snapshots of this older structure hash.
        before_commit: Callables run with the interpreter inside the save's transaction.
    """
    hooks = list(plugins)
    committed = False
    with contextlib.ExitStack() as stack:
        if lock is not None:
            stack.enter_context(lock.acquire(store, key))
        interp, version = load_interpreter(
            store,
            key,
            machine,
            clock=clock,
            plugins=hooks,
            verify_machine_hash=verify_machine_hash,
            expected_machine_hash=expected_machine_hash,
            create=create,
        )
        _managed.add(interp)
        try:
            yield interp
            save_interpreter(
                store,
                key,
                interp,
                expected_version=version if lock is None else lock.expected(version),
                plugins=hooks,
                before_commit=before_commit,
            )
            committed = True
        finally:
            if not committed:
                _quiet_hooks(hooks, "on_rollback", interp)
            _managed.discard(interp)
            interp.stop()
    if committed:
        _call_hooks(hooks, "on_commit", interp)
