"""Two replicas driving one saga instance: at-least-once under OptimisticLock, once under Pessimistic."""

from __future__ import annotations

import threading
from typing import Any

from xsm_celery.eda import DispatchResult, Envelope, InboundDispatcher
from xsm_celery.engine import MachineLogic, create_machine
from xsm_celery.patterns import SagaBuilder
from xsm_celery.persistence import MemoryStore
from xsm_celery.persistence.locks import OptimisticLock, PessimisticLock


def race(
    lock: Any, *, together: threading.Barrier | None
) -> tuple[list[str], list[DispatchResult]]:
    """Two dispatchers (replicas) on one store each take a START for subject o-1 at once."""
    calls: list[str] = []
    guard = threading.Lock()

    def reserve(interp: Any, ctx: dict[str, Any], event: Any) -> str:
        with guard:
            calls.append(interp.store_key)
        if together is not None:
            together.wait(timeout=10)
        return "held"

    saga = SagaBuilder("fulfil", start_event="START").step("reserve", invoke="reserveStock")
    machine = create_machine(
        saga.build(), logic=saga.logic().merge(MachineLogic(services={"reserveStock": reserve}))
    )
    store = MemoryStore()
    replicas = [
        InboundDispatcher(store, {"xsm.fulfil.START": machine}, lock=lock) for _ in range(2)
    ]
    results: list[DispatchResult] = []
    starts = [Envelope.new(type="xsm.fulfil.START", subject="o-1") for _ in range(2)]
    threads = [
        threading.Thread(target=lambda d=d, e=e: results.append(d.handle(e)))
        for d, e in zip(replicas, starts, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not any(thread.is_alive() for thread in threads)
    return calls, results


def test_optimistic_replicas_can_both_run_the_step_service() -> None:
    """The table's row: the replica that loses the save race had already run the service."""
    calls, results = race(OptimisticLock(retries=0), together=threading.Barrier(2))
    assert calls == ["o-1", "o-1"]
    assert sum(r.processed for r in results) == 1
    assert sum(r.retried for r in results) == 1


def test_pessimistic_replicas_run_the_step_service_once() -> None:
    """Under PessimisticLock the second replica waits, finds the saga done, and runs nothing."""
    calls, results = race(PessimisticLock(timeout=10), together=None)
    assert calls == ["o-1"]
    assert sum(r.processed for r in results) == 1
    assert sum(r.dead_lettered for r in results) == 1
