"""Fleet limits on Redis: admission cost, closed-breaker overhead per task, deferral throughput.

1. One fleet rate-limit admission (the token-bucket script: one ``EVALSHA``, Redis time)
   next to a bare redis-py round trip (``PING``), a script that only returns 1, the same
   admission sent through redis-py's ``execute_command``, and the ``limits`` library's Redis
   strategies (fixed and moving window) on the same Redis. Target: at most 1.5x the bare
   round trip.

   Measurement: the peers take turns, 31 rounds of 200 calls each, so a load spike on this
   shared machine hits them all alike. The "us/call" column is the best round of each
   (the least disturbed, as ``timeit`` advises); "vs bare" is the median over the rounds
   of each round's ratio to the ``PING`` of the same round, which a spike in one round
   cannot move.

   Where the time goes (measured on loopback, 2 cores): the socket round trip itself
   dominates (``sendall`` + ``recv``, about 2/3 of a ``PING``). In redis-py, building,
   encoding and framing the ``EVALSHA`` command (nine arguments) costs 8-12 us, about a
   fifth of a round trip, plus its ``execute_command`` bookkeeping (per-command metrics,
   retry wrapper): the admission therefore sends bytes packed once per bucket
   (``FleetRedis.packed`` / ``send``) on a pooled connection, with redis-py's own retries.
   Server side (``INFO commandstats``), the script costs 13-15 us against 3 us for
   ``return 1`` and 0.2 us for ``PING``: ``TIME`` about 4 us, the ``HMGET`` and the
   ``HSET`` about 3 us each, the arithmetic 2 us. That is the floor for an atomic bucket on
   server time (read, decide, write); the index ``ZADD`` and the ``PEXPIRE`` run only when
   the key was last stamped more than 10 s ago, so they cost nothing per call.
2. The closed-state cost of ``breaker="..."`` on a chart task: one delivery of a no-op
   ``ChartTask`` run in this process with and without the breaker option. Target: under
   10 % of the no-op task's cost.
3. Deferral throughput: deliveries of a task over its fleet rate, each re-published with
   its countdown to a Redis broker, per second.
4. What the topology costs: the same token bucket and a bare round trip (an ``EXISTS`` of the
   bucket's key, routed like the script) on one Redis, on a three-primary Redis Cluster and
   on a Redis that speaks only TLS, the last two started by the bench on loopback ports
   (``bench.topologies``) and stopped afterwards. The cluster client finds the node of each
   call's hash tag itself, so the bucket still costs one round trip; "vs bare" compares each
   bucket with the bare call on the same topology. A topology whose binaries
   (``redis-server``, ``redis-cli``, ``openssl``) are missing is skipped.

Needs the shared Redis on 127.0.0.1:6379 (``XSM_BENCH_REDIS_URL`` to change it); every key
and queue is unique to the run and removed afterwards. Run: ``python -m bench fleet``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.timing import per_call_us, table

REDIS_URL = os.environ.get("XSM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
BROKER_URL = REDIS_URL.rsplit("/", 1)[0] + "/13"
ROUND_TRIPS = 3_000
TASK_RUNS = 3_000
DEFERRALS = 1_000
PREFIX = f"xsm-bench-fleet-{uuid.uuid4().hex[:8]}:"


def _rounds(
    fns: dict[str, Callable[[], object]], number: int, rounds: int = 7
) -> dict[str, list[float]]:
    """Us per call of each function in every round, the functions taking turns.

    The machine is shared, so its load drifts; taking turns puts every peer under the
    same load in each round.
    """
    runs: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            runs[name].append(per_call_us(fn, number=number, repeat=1))
    return runs


def _interleaved(
    fns: dict[str, Callable[[], object]], number: int, rounds: int = 7
) -> dict[str, float]:
    """Fastest us per call of each function over interleaved rounds (the least disturbed)."""
    return {name: min(values) for name, values in _rounds(fns, number, rounds).items()}


def admission_rows() -> list[list[str]]:
    """Microseconds per admission for ours, a bare round trip and ``limits``."""
    import redis

    from xsm_celery.redis.fleet_store import FleetRedis
    from xsm_celery.redis.rate_limit import RedisTokenBucket

    client = redis.Redis.from_url(REDIS_URL)
    store = FleetRedis(REDIS_URL, prefix=PREFIX)
    bucket = RedisTokenBucket(store, "bench", 1e6, burst=10**6)  # the ceilings of checks
    bucket.try_acquire()
    floor = client.register_script("return 1")
    unpacked_args = (*bucket._rate_args, 1, 0, bucket._member)
    fns: dict[str, Callable[[], object]] = {
        "bare redis-py round trip (PING)": client.ping,
        "a script that only returns 1 (EVALSHA)": floor,
        "xsm_celery fleet token bucket": bucket.try_acquire,
        "same script via execute_command": lambda: store.run(
            "TOKEN_BUCKET", bucket._keys, unpacked_args
        ),
    }
    try:
        from limits import RateLimitItemPerSecond
        from limits.storage import RedisStorage
        from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

        storage = RedisStorage(REDIS_URL, key_prefix=f"{PREFIX}limits")
        item = RateLimitItemPerSecond(10**9)
        fixed, moving = FixedWindowRateLimiter(storage), MovingWindowRateLimiter(storage)
        fns["limits fixed window (Redis)"] = lambda: fixed.hit(item, "bench")
        fns["limits moving window (Redis)"] = lambda: moving.hit(item, "bench-moving")
    except ImportError:
        print("limits is not installed; skipped (it is in the dev extra)")
    runs = _rounds(fns, 200, rounds=31)
    bare = runs["bare redis-py round trip (PING)"]
    rows = []
    for name, values in runs.items():
        ratio = statistics.median(us / ping for us, ping in zip(values, bare, strict=True))
        rows.append([name, f"{min(values):.1f}", f"{ratio:.2f}x"])
    return rows


def _task_app() -> Any:
    from celery import Celery

    from xsm_celery.celery import Xsm

    app = Celery("bench-fleet", set_as_current=False)
    app.conf.update(
        broker_url=BROKER_URL,
        task_default_queue=f"xsm-bench-fleet-{uuid.uuid4().hex[:8]}",
        xsm_redis_url=REDIS_URL,
        xsm_fleet_prefix=PREFIX,
        xsm_dead_letter_store="memory://bench-fleet",
        # Deliveries are pushed into this process by hand (no worker), so in-process markers
        # are right; eager mode is what the settings check asks of memory markers.
        task_always_eager=True,
        xsm_attempt_markers="memory://",
        xsm_breakers={"bench": {"failure_threshold": 5, "cooldown_ms": 30_000}},
    )
    return app, Xsm(app)


def _deliver(task: Any, headers: dict[str, Any] | None = None) -> Any:
    queue = task.app.conf.task_default_queue
    task.push_request(
        id=str(uuid.uuid4()),
        args=[],
        kwargs={},
        headers=headers or {},
        delivery_info={"exchange": "", "routing_key": queue},
        is_eager=False,
        called_directly=False,
        retries=0,
        hostname="bench@host",
    )
    try:
        return task()
    finally:
        task.pop_request()


def breaker_rows() -> list[list[str]]:
    """Per-delivery cost of a no-op chart task, without and with a closed fleet breaker."""
    app, xsm = _task_app()

    @xsm.task(shared=False, name="bench.plain")
    def plain() -> int:
        return 1

    @xsm.task(shared=False, name="bench.guarded", breaker="bench")
    def guarded() -> int:
        return 1

    _deliver(plain), _deliver(guarded)
    times = _interleaved(
        {"plain": lambda: _deliver(plain), "guarded": lambda: _deliver(guarded)},
        100,
        rounds=61,
    )
    base, with_breaker = times["plain"], times["guarded"]
    from xsm_celery.celery.fleet.plan import fleet_plan

    plan = fleet_plan(guarded, app)
    assert plan is not None
    breaker = plan.breaker()

    def admit_and_record() -> None:
        breaker.record(breaker.admit(), "success")

    alone = per_call_us(admit_and_record, number=TASK_RUNS * 10)
    return [
        ["no-op ChartTask delivery", f"{base:.1f}", ""],
        [
            "same with breaker= (closed)",
            f"{with_breaker:.1f}",
            f"{(with_breaker - base) / base * 100:+.1f} %",
        ],
        [
            "closed breaker admit + record alone",
            f"{alone:.2f}",
            f"{alone / base * 100:.1f} % of the task",
        ],
    ]


def deferral_rows() -> list[list[str]]:
    """Deferrals per second of a task whose fleet rate is spent."""
    from celery.exceptions import Ignore

    from xsm_celery.celery.fleet.plan import RateLimit

    app, xsm = _task_app()

    @xsm.task(
        shared=False,
        ignore_result=True,
        name="bench.starved",
        fleet_rate_limit=RateLimit("1/h", burst=1),
    )
    def starved() -> int:
        return 1

    _deliver(starved)
    started = time.perf_counter()
    deferred = 0
    for _ in range(DEFERRALS):
        try:
            _deliver(starved)
        except Ignore:
            deferred += 1
    elapsed = time.perf_counter() - started
    with app.connection_for_write() as conn:
        conn.default_channel.queue_delete(app.conf.task_default_queue)
    return [
        [
            "deferrals (admission + re-publish to Redis)",
            f"{deferred / elapsed:,.0f}/s",
            f"{elapsed / max(deferred, 1) * 1e6:.0f} us each",
        ],
    ]


def topology_rows() -> list[list[str]]:
    """Us per token-bucket admission and per bare round trip: one Redis, a cluster, TLS."""
    import tempfile
    from contextlib import ExitStack
    from pathlib import Path

    import redis

    from bench.topologies import TlsRedis, TopologyUnavailableError, start_cluster
    from xsm_celery.redis.connection import redis_client
    from xsm_celery.redis.fleet_store import FleetRedis
    from xsm_celery.redis.rate_limit import RedisTokenBucket

    with ExitStack() as stack:
        clients: dict[str, redis.Redis[bytes]] = {"one Redis": redis.Redis.from_url(REDIS_URL)}
        try:
            nodes = start_cluster()
            stack.callback(nodes.stop)
            clients["Redis Cluster, 3 primaries"] = redis_client(nodes.url)
        except TopologyUnavailableError as exc:
            print(f"{exc}; the cluster rows are skipped")
        folder = Path(tempfile.mkdtemp(prefix="xsm-bench-tls-"))
        tls = TlsRedis(folder)
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        stack.callback(tls.stop)
        try:
            tls.start()
            clients["one Redis over TLS"] = redis_client(tls.url)
        except TopologyUnavailableError as exc:
            print(f"{exc}; the TLS rows are skipped")
        for client in clients.values():
            stack.callback(client.close)
        fns: dict[str, Callable[[], object]] = {}
        for label, client in clients.items():
            bucket = RedisTokenBucket(
                FleetRedis(client, prefix=PREFIX), "bench-topology", 1e6, burst=10**6
            )
            bucket.try_acquire()
            key = bucket._keys[0]
            fns[f"{label}: bare round trip (EXISTS)"] = lambda c=client, k=key: c.exists(k)
            fns[f"{label}: fleet token bucket"] = bucket.try_acquire
        runs = _rounds(fns, 200, rounds=15)
    rows = []
    for label in clients:
        bare = runs[f"{label}: bare round trip (EXISTS)"]
        for name in (f"{label}: bare round trip (EXISTS)", f"{label}: fleet token bucket"):
            values = runs[name]
            ratio = statistics.median(us / b for us, b in zip(values, bare, strict=True))
            rows.append([name, f"{min(values):.1f}", f"{ratio:.2f}x"])
    return rows


def _clean() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{PREFIX}*", count=1000))
    if keys:
        client.delete(*keys)


def main() -> None:
    """Print the four tables."""
    import logging

    logging.getLogger("xsm_celery.celery.fleet.admission").setLevel(logging.WARNING)
    try:
        print("Fleet limiter admission vs one bare round trip (target <= 1.5x)")
        print(table(["admission", "best us/call", "vs bare (median)"], admission_rows()))
        print("\nClosed fleet breaker per task (target < 10 % of a no-op task)")
        print(table(["per delivery", "us", "share"], breaker_rows()))
        print("\nDeferral throughput (one process)")
        print(table(["what", "rate", "cost"], deferral_rows()))
        print("\nWhat the topology costs: token bucket vs a bare round trip on each")
        print(table(["call", "best us/call", "vs bare (median)"], topology_rows()))
    finally:
        _clean()


if __name__ == "__main__":
    main()
