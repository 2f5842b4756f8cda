"""Workflow events/s on one solo worker next to the same change made by hand in a plain task.

Redis broker, PostgreSQL store (a private schema, dropped afterwards). Two comparisons:

* **events**: N ``INC`` events over K keys, each a workflow step (lock, inbox check, load,
  send, save snapshot, inbox receipt and transition log in one transaction) against a plain
  Celery task that does the same by hand: ``SELECT ... FOR UPDATE`` the row, change its JSON,
  commit. Both are acknowledged late. Target: the workflow keeps at least 80% of the
  hand-written rate.
* **three steps**: M orders of reserve -> charge -> ship, each step a Celery task on the same
  worker, as a ``SagaBuilder`` saga run as a workflow (every result comes back as
  ``done.invoke`` and is committed, compensations ready) against a Celery ``chain`` of the
  same three tasks (no state kept between them).

The worker times from the start of its first task to the last expected one and writes the
figure to Redis.

Where the time went (cProfile of the solo worker, statements counted with SQLAlchemy's
``before_cursor_execute``): a step made one store call per row -- ``BEGIN``, the advisory
lock, the inbox read, the snapshot read, the conditional update, the receipt upsert,
``COMMIT`` -- seven round trips (plus the pool's pre-ping) against the hand-written task's
four, and on the shared 2-core host each round trip waits for the PostgreSQL backend to be
scheduled: about 60% of a step was psycopg waiting, the chart itself (restore, send,
dump) a few percent, and Celery's own per-message cost is the same for both tasks. Now a
step is ``BEGIN``, one statement that claims the message id in the inbox and locks and reads
the instance row, one that writes the snapshot, the receipt and the transition log, and
``COMMIT`` (``xsm_celery.sqlalchemy.workflow_session``), the hand-written task's count; what
remains is those two statements doing more (an inbox row and a log row per event) and the
chart step. Measured on that host, best of three (medians in brackets), one run after the
other: before 29% (57%), after 84% (91%); see ``docs/workflows.md``'s Sizing.

Later (py-spy of both workers, 3,000 events each, and cProfile on the CPU clock in one
process): both tasks paid a fifth round trip, SQLAlchemy's ``pool_pre_ping`` on every
checkout. The stores now ping only a connection idle for ``PING_IDLE_S`` (a dead one used
sooner fails as an outage, retried uncounted); the hand-written peer keeps
``pool_pre_ping=True``. The rest of the gap is the server's extra writes (the inbox row and
its receipt, the log row) and about 150 us of Python per step, spread thin: the chart's
restore, send and dump, SQLAlchemy's result set-up for the claim's five columns, Celery's
``saferepr`` of the step's result dict. Quiet 2-core machine: 74% (84%) before the idle
ping, 79% (78%) after.

How the headline is read: each round runs the peer and then the workflow on fresh queues,
and the figure is the median over the rounds of workflow / peer in the same round. Rates on
this machine swing by a fifth from one run to the next (the hand-written peer read 404 to
583 events/s within one hour), so the best of each side, taken from different rounds, can
pair a lucky peer with an unlucky workflow; the paired median follows what both sides met
together. Best-of figures stay beside it. With the durability rows (ledger, timer and task
step rows) added, the same paired reading of the code before and after, run alternately
from two worktrees on a quiet machine (eight pairs each), gave 0.82 before and 0.89 after: the rows cost a plain event step nothing, since it arms no
timer and dispatches no task.

Run: ``python -m bench.bench_workflow`` (Redis on 127.0.0.1:6379 and
PostgreSQL on 127.0.0.1:5432, or ``XSM_BENCH_REDIS`` / ``XSM_BENCH_POSTGRES``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any
from urllib.parse import quote

import redis
import sqlalchemy as sa
from celery import Celery, chain
from celery.signals import task_prerun, task_success

from bench.solo_worker import ROOT, drain
from bench.timing import table
from xsm_celery.celery import Xsm, celery_service
from xsm_celery.engine import MachineLogic, create_machine
from xsm_celery.hooks import Fact, FactKind, subscribe
from xsm_celery.patterns import SagaBuilder

REDIS = os.environ.get("XSM_BENCH_REDIS", "redis://127.0.0.1:6379/12")
POSTGRES = os.environ.get("XSM_BENCH_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


#: Events per run over this many keys; orders per three-step run; paired rounds per scenario.
EVENTS_N = 1500
KEYS = 50
ORDERS_N = 200
ROUNDS = 5

SCHEMA = os.environ.get("XSM_BENCH_SCHEMA", "public")
STORE = f"{POSTGRES}?options={quote(f'-csearch_path={SCHEMA}')}"

app = Celery("bench_workflow", broker=REDIS)
app.conf.update(
    task_ignore_result=True,
    worker_prefetch_multiplier=4,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    xsm_dead_letter_store="memory://bench",
    xsm_timer_store="sqlite://",
    xsm_workflow_store=STORE,
    task_default_queue=os.environ.get("XSM_BENCH_QUEUE", "celery"),
)
xsm = Xsm(app)

_engine: sa.Engine | None = None


def engine() -> sa.Engine:
    """The hand-written task's engine (made in the worker, after any fork)."""
    global _engine
    if _engine is None:
        _engine = sa.create_engine(STORE, pool_pre_ping=True)
    return _engine


def _inc(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["n"] += 1


COUNTER_CHART = {
    "id": "bench_counter",
    "initial": "on",
    "context": {"n": 0},
    "states": {"on": {"on": {"INC": {"actions": "inc"}}}},
}
counter = xsm.workflow(
    create_machine(COUNTER_CHART, logic=MachineLogic(actions={"inc": _inc})),
    name="bench_counter",
)


@app.task(name="bench.hand_inc", acks_late=True)
def hand_inc(key: str) -> None:
    """The same change by hand: lock the row, change its JSON, commit."""
    with engine().begin() as conn:
        row = conn.execute(
            sa.text("SELECT doc FROM bench_hand WHERE key = :k FOR UPDATE"), {"k": key}
        ).first()
        doc = json.loads(row[0])
        doc["n"] += 1
        conn.execute(
            sa.text("UPDATE bench_hand SET doc = :d WHERE key = :k"),
            {"d": json.dumps(doc), "k": key},
        )


@app.task(name="bench.reserve", acks_late=True)
def reserve(order: str) -> str:
    """Step one: reserve the stock."""
    return order


@app.task(name="bench.charge", acks_late=True)
def charge(order: str) -> str:
    """Step two: charge the card."""
    return order


@app.task(name="bench.ship", acks_late=True)
def ship(order: str) -> str:
    """Step three: ship the parcel."""
    return order


@app.task(name="bench.release", acks_late=True)
def release(order: str) -> str:
    """Compensation of step one (not reached: no step fails)."""
    return order


@app.task(name="bench.refund", acks_late=True)
def refund(order: str) -> str:
    """Compensation of step two (not reached)."""
    return order


def _order_arg(ctx: dict[str, Any], event: Any) -> list[Any]:
    return [ctx["order"]]


SAGA = (
    SagaBuilder("bench_saga")
    .step("reserve", invoke="reserve", compensate="release")
    .step("charge", invoke="charge", compensate="refund")
    .step("ship", invoke="ship")
)
STEPS = {"reserve": reserve, "charge": charge, "ship": ship, "release": release, "refund": refund}
orders = xsm.workflow(
    create_machine(
        SAGA.build(),
        logic=SAGA.logic().merge(
            MachineLogic(
                services={
                    name: celery_service(task, args=_order_arg) for name, task in STEPS.items()
                }
            )
        ),
    ),
    name="bench_orders",
)


def _saga_done(fact: Fact) -> None:
    """The saga's last step completed (the fact is emitted in that step, before its commit)."""
    if (
        fact.kind is FactKind.SAGA_STEP
        and fact.fields.get("step") == "ship"
        and fact.fields.get("outcome") == "completed"
    ):
        _finished()


subscribe(_saga_done)

_done = {"n": 0, "t0": 0.0}


@task_prerun.connect
def _start(**_: Any) -> None:
    """The clock starts when the first task starts (worker start-up is not counted)."""
    if not _done["t0"]:
        _done["t0"] = time.perf_counter()


def _finished() -> None:
    _done["n"] += 1
    expect = int(os.environ.get("XSM_BENCH_EXPECT", "0"))
    if _done["n"] == expect:
        elapsed = time.perf_counter() - _done["t0"]
        redis.Redis.from_url(REDIS).set(os.environ["XSM_BENCH_KEY"], f"{expect} {elapsed}")


@task_success.connect
def _count(sender: Any = None, **_: Any) -> None:
    """Count the successes of the task the run waits for (``XSM_BENCH_TASK``)."""
    if getattr(sender, "name", None) == os.environ.get("XSM_BENCH_TASK"):
        _finished()


def _drain(queue: str, expect: int, task_name: str) -> float:
    """Drain ``queue`` with a solo worker until ``expect`` counted completions; seconds taken."""
    env = {"XSM_BENCH_EXPECT": str(expect), "XSM_BENCH_QUEUE": queue, "XSM_BENCH_TASK": task_name}
    raw = drain(
        "bench.bench_workflow", REDIS, None, queue=queue, env=env, timeout_s=300, what=task_name
    )
    count, elapsed = raw.decode().split()
    return float(elapsed) if int(count) == expect else float("nan")


def run_events(kind: str) -> float:
    """Events/s of ``kind`` (``workflow`` or ``hand``) over fresh keys on a fresh queue."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    run = uuid.uuid4().hex[:6]
    keys = [f"{run}-{i}" for i in range(KEYS)]
    if kind == "hand":
        with engine().begin() as conn:
            conn.execute(
                sa.text("INSERT INTO bench_hand (key, doc) VALUES (:k, :d)"),
                [{"k": k, "d": json.dumps({"n": 0})} for k in keys],
            )
    else:
        for key in keys:
            counter.start(key)
    with app.connection_for_write() as conn:
        for n in range(EVENTS_N):
            key = keys[n % KEYS]
            if kind == "hand":
                hand_inc.apply_async((key,), queue=queue, connection=conn)
            else:
                message = {"id": f"{run}-e{n}", "kind": "event", "type": "INC"}
                counter.task.apply_async((key, message), queue=queue, connection=conn)
    name = hand_inc.name if kind == "hand" else counter.task.name
    return EVENTS_N / _drain(queue, EVENTS_N, name)


def run_orders(kind: str) -> float:
    """Orders/s through three task steps, as a workflow or as a chain."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    run = uuid.uuid4().hex[:6]
    app.conf.task_default_queue = queue
    with app.connection_for_write() as conn:
        for n in range(ORDERS_N):
            order = f"{run}-{n}"
            if kind == "chain":
                chain(reserve.s(order), charge.s(), ship.s()).apply_async(
                    queue=queue, connection=conn
                )
            else:
                orders.task.apply_async(
                    args=[order, {"id": order, "kind": "start", "payload": {"order": order}}],
                    queue=queue,
                    connection=conn,
                )
    expect_task = ship.name if kind == "chain" else "none"
    return ORDERS_N / _drain(queue, ORDERS_N, expect_task)


def _setup_schema() -> str:
    schema = f"xsm_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(POSTGRES)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        conn.exec_driver_sql(
            f"CREATE TABLE {schema}.bench_hand (key VARCHAR(255) PRIMARY KEY, doc TEXT NOT NULL)"
        )
    admin.dispose()
    return schema


def _drop_schema(schema: str) -> None:
    admin = sa.create_engine(POSTGRES)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    admin.dispose()


def main() -> None:
    """Print both comparisons: the median of paired round ratios, with best-of beside."""
    if "XSM_BENCH_SCHEMA" not in os.environ:
        schema = _setup_schema()
        try:
            env = {**os.environ, "XSM_BENCH_SCHEMA": schema, "PYTHONPATH": str(ROOT)}
            subprocess.run([sys.executable, "-m", "bench.bench_workflow"], env=env, check=True)
        finally:
            _drop_schema(schema)
        return
    rows = []
    for label, ours, peer, run, unit in (
        (f"{EVENTS_N} events / {KEYS} keys", "workflow", "hand", run_events, "events/s"),
        (f"{ORDERS_N} orders, 3 task steps", "workflow", "chain", run_orders, "orders/s"),
    ):
        peer_rates, our_rates = [], []
        for _ in range(ROUNDS):
            peer_rates.append(run(peer))
            our_rates.append(run(ours))
        paired = statistics.median(o / p for p, o in zip(peer_rates, our_rates, strict=True))
        p, o = max(peer_rates), max(our_rates)
        rows.append(
            [
                label,
                f"{statistics.median(peer_rates):,.0f} {unit}",
                f"{statistics.median(our_rates):,.0f} {unit}",
                f"{paired:.0%}",
                f"{p:,.0f} / {o:,.0f} ({o / p:.0%})",
            ]
        )
    headers = [
        "solo worker, Redis + PostgreSQL",
        "peer (median)",
        "workflow (median)",
        "workflow/peer (paired)",
        "best of each (ratio)",
    ]
    print(table(headers, rows))
    print(
        f"\n{ROUNDS} rounds, each the peer then the workflow; headline: median of the "
        "rounds' ratios. Target >= 80% for events (the chain keeps no state)"
    )


if __name__ == "__main__":
    main()
