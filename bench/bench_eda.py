"""Event plumbing over kombu on one Redis: raw kombu against the relay and the dispatcher.

One run, one Redis (``XSM_TEST_REDIS_URL`` or 127.0.0.1:6379, database 5), one envelope
shape. Rows of the table:

* raw kombu publish: ``Producer.publish`` of the envelope JSON, one call per message;
* relay, one publish per row: ``OutboxRelay`` over a SQLite outbox (WAL, leases on)
  publishing each row with ``KombuBrokerAdapter.publish`` (target: >= 0.95x raw publish);
* raw kombu batched publish: the same bodies in ``Producer.batch`` on the anonymous exchange;
* relay, batched: the same relay using ``publish_many`` (kombu ``Producer.batch`` on the
  anonymous exchange), run by run; 5x xstate-statemachine is its target;
* relay, batched, batch by batch: the same relay and raw kombu paired one 1,000-row batch
  at a time (``batch_by_batch``), the median of the pairs' ratios; target >= 0.75x. Its A/A
  control row pairs two raw batches the same way and prints the pairing's noise floor;
* xstate-statemachine 0.11.0's ``OutboxRelay`` and ``SQLiteOutboxStore`` over the same
  outbox file and Redis, through a minimal sync adapter over kombu;
* raw kombu consume+ack: a ``Consumer`` acking each message in its callback;
* dispatcher with the inbox on (memory stores, then SQLite stores): envelopes/s through
  ``InboundDispatcher.run_once_sync`` over ``KombuBrokerAdapter`` (targets: >= 50% and
  >= 30% of raw consume+ack).

Every round runs all rows once, a relay right after its raw baseline, and each rate is the
best over the rounds: on a shared machine a burst of a neighbour's load then slows a relay
and its baseline alike, where measuring all raw runs first and all relay runs later
compared one load with another.

Where the relay's time goes (cProfile of this bench's runs, 5,000 and 10,000 rows):

* one publish per row: about 94% was kombu's ``Producer.publish``, the same call the raw row
  makes: its virtual Redis transport builds a redis-py client per message (about 50 us,
  redis-py filling its response-callback table) and waits one LPUSH round trip (about
  80 us). The adapter's channels now keep one client per connection pool
  (``xsm_celery.kombu.redis_client``), so the relay publishes faster than raw kombu:
  1.3-1.6x here, where it was 0.84-0.98x. The outbox adds a few microseconds a row on top: one claim per batch
  (one SELECT and one ``UPDATE ... WHERE seq BETWEEN``, one transaction), one
  ``UPDATE ... WHERE seq IN (...)`` per 500 rows marked sent, and the adapter's routing.
  No Producer, channel or declare per row, and no fact is built without a subscriber.
* batched: decoding each claimed row's JSON back into an ``Envelope`` (``json.loads`` and a
  dict per row) was a fifth of the run although the relay re-sends the stored text as is.
  ``Envelope.from_trusted_json`` now parses only when an attribute is read, and on one
  partition the adapter reads none. What is left is SQLite (the claim's two statements,
  the mark, their commits and WAL checkpoints, ~15-25 us a row here) and the collector:
  a batch's records live through its whole publish, so they reach the oldest generation
  and trigger a full collection every few batches (the raw loop keeps nothing alive).
  Each stored envelope is one object with no ``__dict__`` built, and the adapter holds
  plain strings for the batch rather than (queue, body) pairs, to keep that small.
* Then (wall clock, six paired rounds, quiet machine): ``publish_many`` on its own costs what
  the raw batched loop does (24.6 against 24.5 us a row); inside the relay it is 26.4, and
  the outbox added the claim (2.6 us a row) and the mark (3.1), so the relay kept 0.75x of
  the raw batched publish, and 0.70-0.81x across runs as the raw baseline's speed swung
  (24-47 us a row within the hour). Both costs were SQLite page writes: the claim stamped
  ``claimed_by`` / ``claimed_until`` on every row of the batch and the mark rewrote every
  row again (about 100 pages each for 1,000 rows), and each commit wrote those pages to
  the WAL. Tried without gain: ``seq BETWEEN`` ranges instead of ``IN`` lists for the
  mark; marking each published chunk on a helper thread while the next publishes (the
  publish slowed to 50 us a row: the GIL hand-overs, and Redis needs the second core);
  ``mmap_size``; one transaction for a mark and the next claim; a larger
  ``wal_autocheckpoint`` (the commits got cheaper, the claim's reads through a longer WAL
  dearer). Moving the envelope text out of the leased rows saved only about 1 us a row in
  plain SQLite: most of the cost was per row, not per byte.
* So the SQLite outbox now leases by range (``xsm_celery.eda.lease_ranges``): a claim
  writes one ``xsm_outbox_lease`` row per run of rows it took and no row of the outbox.
  On the store alone (1,000-row batches of this envelope, same machine, same minutes) the
  claim went from 7.4-11.2 to 2.5-4.9 us a row; split, the old claim's UPDATE was 0.8-1.3
  and its commit 2.1-3.2 us a row, the new one's insert and commit 0.05-0.1. In the relay
  (six paired rounds on a machine whose raw batched publish ran at 43-86 us a row) the
  claim is 2.9-5.1 and the mark 4.0-5.5 us a row, and the median ratio by round went from
  0.64-0.72x (two runs before the change, the same morning) to 0.68-0.87x (six runs after).
* Those run-by-run figures swing because the machine does: in the same minute raw kombu
  alone ran at 39-73 us a row from one 20,000-row run to the next. Paired batch by batch
  (``batch_by_batch``: a raw batch, a relay batch, a raw batch, a second apart) the A/A
  control reads 0.98-1.01x, and the relay's median ratio over 60 pairs read 0.78-0.82x
  before range leases and 0.83-0.86x after (three runs each, one after the other), so the
  table leads the batched relay's target with that row.
  What is left: the mark's UPDATE and commit (about 1.2 and 1.5-1.9 us a row), the claim's
  read (about 2.2 us a row, most of it building the rows' Python objects), and the batch's
  records, which live through the publish and make the collector's full collections
  costlier than in the raw loop, where nothing stays alive.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kombu import Connection, Consumer, Producer

from bench.timing import table
from xsm_celery.eda import Envelope, OutboxRelay, SQLiteOutboxStore, new_id
from xsm_celery.kombu import KombuBrokerAdapter
from xsm_celery.kombu.adapter import DEFAULT_BATCH_SIZE
from xsm_celery.kombu.wire import publish_options

REDIS = os.environ.get("XSM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0] + "/5"
ROWS = int(os.environ.get("XSM_BENCH_EDA_ROWS", "20000"))
CONSUME = int(os.environ.get("XSM_BENCH_EDA_CONSUME", "5000"))
#: Each rate is the best of this many runs: the machine is shared, so the slow runs
#: measure the neighbours, not the code.
REPEAT = int(os.environ.get("XSM_BENCH_EDA_REPEAT", "3"))
RELAY_BATCH = 1000
#: A topic of this run only: other checkouts may run this bench on the same Redis at once.
TOPIC = f"xsm-bench-eda-{os.getpid()}"
#: The wire options KombuBrokerAdapter uses on Redis, given to the raw and peer baselines
#: too so that every row publishes the same bytes.
WIRE = {"body_encoding": "utf-8"}
#: The adapter's publish options, given to every raw baseline publish.
OPTIONS = publish_options()
#: CPU microseconds per row of every publishing run, by measure: on a shared machine the
#: wall clock of one run swings with the neighbours, this process's CPU time much less.
_CPU_US: dict[str, list[float]] = {}


def _cpu_per_row(name: str, cpu_start: float, rows: int) -> None:
    _CPU_US.setdefault(name, []).append((time.process_time() - cpu_start) * 1e6 / rows)


def _envelopes(n: int) -> list[Envelope]:
    return [
        Envelope.new(type="order.paid", subject=f"o-{i % 500}", data={"total": i, "sku": "A-1"})
        for i in range(n)
    ]


def _purge() -> None:
    with KombuBrokerAdapter(REDIS) as adapter:
        adapter.purge(TOPIC)


def raw_publish(envs: list[Envelope]) -> float:
    """Messages/s of a plain kombu producer publishing the same JSON bodies."""
    bodies = [env.to_json() for env in envs]
    with Connection(REDIS, transport_options=WIRE) as conn:
        producer = Producer(conn.default_channel, auto_declare=False)
        start, cpu = time.perf_counter(), time.process_time()
        for body in bodies:
            producer.publish(body, routing_key=TOPIC, **OPTIONS)
        elapsed = time.perf_counter() - start
        _cpu_per_row("publish", cpu, len(bodies))
    _purge()
    return len(bodies) / elapsed


def raw_batched_publish(envs: list[Envelope]) -> float:
    """Messages/s of a plain kombu producer publishing the same bodies in ``Producer.batch``.

    The peer of the batched relay: the anonymous exchange, the adapter's batch size, the
    same routing key, so the only difference left is the outbox (claim, mark sent).
    """
    bodies = [env.to_json() for env in envs]
    with Connection(REDIS, transport_options=WIRE) as conn:
        producer = Producer(conn.default_channel, auto_declare=False)
        start, cpu = time.perf_counter(), time.process_time()
        for first in range(0, len(bodies), RELAY_BATCH):
            _publish_raw_batch(producer, bodies[first : first + RELAY_BATCH])
        elapsed = time.perf_counter() - start
        _cpu_per_row("publish_batched", cpu, len(bodies))
    _purge()
    return len(bodies) / elapsed


def _publish_raw_batch(producer: Producer, bodies: list[str]) -> None:
    """One ``Producer.batch`` of ``bodies``: the adapter's batch size, its routing, its options."""
    with producer.batch(max_size=DEFAULT_BATCH_SIZE):  # type: ignore[attr-defined]
        for body in bodies:
            producer.publish(body, routing_key=TOPIC, **OPTIONS)


def _outbox_file(folder: Path, name: str, envs: list[Envelope]) -> Path:
    path = folder / f"{name}-{new_id()}.db"
    store = SQLiteOutboxStore(path)
    store.add_many([(TOPIC, env) for env in envs])
    store.db.close()
    return path


def our_relay(folder: Path, envs: list[Envelope], *, batched: bool) -> float:
    """Rows/s of this package's relay over a SQLite outbox, leases on."""
    path = _outbox_file(folder, f"ours-{batched}", envs)
    store = SQLiteOutboxStore(path)
    with KombuBrokerAdapter(REDIS, batch_size=RELAY_BATCH) as broker:
        relay = OutboxRelay(store, broker, batch=RELAY_BATCH, use_batches=batched, lease_s=60)
        start, cpu = time.perf_counter(), time.process_time()
        sent = relay.relay_all_sync(max_batches=10_000)
        elapsed = time.perf_counter() - start
        _cpu_per_row("batched" if batched else "single", cpu, sent)
    assert sent == len(envs), "relay lost rows"
    assert store.count(pending_only=True) == 0, "relay left rows pending"
    _purge()
    return sent / elapsed


#: Rounds of ``batch_by_batch``, each a fresh outbox of every row: 3 x 20 pairs by default.
PAIRED_ROUNDS = int(os.environ.get("XSM_BENCH_EDA_PAIRED_ROUNDS", "3"))


def batch_by_batch(folder: Path, envs: list[Envelope]) -> tuple[list[float], list[float], float]:
    """The batched relay against raw kombu, paired one 1,000-row batch at a time.

    Each pair is a raw batch, one ``relay_once_sync`` (claim, ``publish_many``, mark) and a
    second raw batch of the same bodies, on the same Redis queue. Returns the relay's
    ratio to the mean of its two raw batches and the first raw batch's ratio to the second
    (the A/A control: the noise floor of the pairing), for every pair, and the relay's rows
    per second over all pairs. On this 2-core machine the raw baseline's speed swings by
    half within a minute; paired a second apart, a relay and its baseline see the same load.
    """
    bodies = [env.to_json() for env in envs]
    ratios: list[float] = []
    control: list[float] = []
    relay_s, relayed = 0.0, 0
    for _ in range(PAIRED_ROUNDS):
        store = SQLiteOutboxStore(_outbox_file(folder, "paired", envs))
        with (
            Connection(REDIS, transport_options=WIRE) as conn,
            KombuBrokerAdapter(REDIS, batch_size=RELAY_BATCH) as broker,
        ):
            producer = Producer(conn.default_channel, auto_declare=False)
            relay = OutboxRelay(store, broker, batch=RELAY_BATCH, lease_s=60)
            for first in range(0, len(bodies), RELAY_BATCH):
                chunk = bodies[first : first + RELAY_BATCH]
                start = time.perf_counter()
                _publish_raw_batch(producer, chunk)
                before = time.perf_counter() - start
                start = time.perf_counter()
                sent = relay.relay_once_sync()
                took = time.perf_counter() - start
                start = time.perf_counter()
                _publish_raw_batch(producer, chunk)
                after = time.perf_counter() - start
                assert sent == len(chunk), "relay lost rows"
                relay_s, relayed = relay_s + took, relayed + sent
                ratios.append((before + after) / 2 / took)
                control.append(before / after)
        _purge()
    return ratios, control, relayed / relay_s if relay_s else 0.0


class _PeerAdapter:
    """The smallest sync adapter 0.11.0's relay can publish through: kombu, one call a row."""

    def __init__(self, conn: Connection) -> None:
        self._producer = Producer(conn.default_channel, auto_declare=False)
        self._options = publish_options()

    def publish(self, topic: str, envelope: Any) -> None:
        self._producer.publish(envelope.to_json(), routing_key=topic, **self._options)


def peer_relay(folder: Path, envs: list[Envelope]) -> float:
    """Rows/s of xstate-statemachine 0.11.0's relay over the same outbox and Redis."""
    from xstate_statemachine.eda import OutboxRelay as PeerRelay
    from xstate_statemachine.eda import SQLiteOutboxStore as PeerStore

    path = _outbox_file(folder, "peer", envs)
    store = PeerStore(str(path))
    with Connection(REDIS, transport_options=WIRE) as conn:
        relay = PeerRelay(store, _PeerAdapter(conn), batch=RELAY_BATCH, lease_s=60)
        start = time.perf_counter()
        sent = 0
        while True:
            done = relay.relay_once_sync()
            sent += done
            if done < RELAY_BATCH:
                break
        elapsed = time.perf_counter() - start
    assert sent == len(envs), "0.11.0 relay lost rows"
    store.close()
    _purge()
    return sent / elapsed


def _fill(envs: list[Envelope]) -> None:
    with KombuBrokerAdapter(REDIS) as adapter:
        adapter.purge(TOPIC)
        adapter.publish_many(TOPIC, envs)


def raw_consume(envs: list[Envelope]) -> float:
    """Messages/s of a kombu consumer acking each message in its callback."""
    _fill(envs)
    seen = [0]

    def on_message(message: Any) -> None:
        message.ack()
        seen[0] += 1

    with Connection(REDIS, transport_options={**WIRE, "polling_interval": 0.2}) as conn:
        consumer = Consumer(conn.default_channel, queues=[], on_message=on_message)
        from xsm_celery.kombu.wire import declare_queue

        consumer.add_queue(declare_queue(TOPIC, "redis"))
        consumer.qos(prefetch_count=100)
        consumer.consume()
        start = time.perf_counter()
        while seen[0] < len(envs):
            conn.drain_events(timeout=5)
        elapsed = time.perf_counter() - start
        consumer.cancel()
    return len(envs) / elapsed


def dispatcher_rate(envs: list[Envelope], make: Callable[[], Any]) -> float | None:
    """Envelopes/s through the dispatcher with an inbox, or None if it is not built yet."""
    try:
        dispatcher = make()
    except ImportError:
        return None
    _fill(envs)
    with KombuBrokerAdapter(REDIS) as broker:
        start = time.perf_counter()
        processed = 0
        while processed < len(envs):
            result = dispatcher.run_once_sync(broker, TOPIC)
            processed += result.processed + result.duplicates
        elapsed = time.perf_counter() - start
    return len(envs) / elapsed


def _order_machine() -> Any:
    from xsm_celery import MachineLogic, create_machine

    def add(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
        ctx["total"] = ctx.get("total", 0) + event.payload.get("total", 0)

    return create_machine(
        {
            "id": "order",
            "initial": "open",
            "context": {"total": 0},
            "states": {"open": {"on": {"PAID": {"actions": "add"}}}},
        },
        logic=MachineLogic(actions={"add": add}),
    )


def _paid(envelope: Envelope) -> str:
    return "PAID"


def memory_dispatcher() -> Any:
    """The dispatcher over memory stores, inbox on."""
    from xsm_celery.eda import InboundDispatcher
    from xsm_celery.persistence import MemoryInbox, MemoryStore

    return InboundDispatcher(
        MemoryStore(), {"order.paid": _order_machine()}, inbox=MemoryInbox(), event_type=_paid
    )


def sqlite_dispatcher(folder: Path) -> Callable[[], Any]:
    """A factory of the dispatcher over one SQLite file for snapshots and inbox."""

    def make() -> Any:
        from xsm_celery.eda import InboundDispatcher
        from xsm_celery.persistence import SQLiteInbox, SQLiteStore

        store = SQLiteStore(folder / f"dispatch-{new_id()}.db")
        return InboundDispatcher(
            store, {"order.paid": _order_machine()}, inbox=SQLiteInbox(store), event_type=_paid
        )

    return make


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _ratio(value: float | None, base: float) -> str:
    return "n/a" if value is None else f"{value / base:.2f}x"


def _interleaved(
    measures: dict[str, Callable[[], float | None]],
) -> dict[str, list[float | None]]:
    """Each measure's rate in each of ``REPEAT`` rounds, every round running all of them.

    A measure and its baseline run next to each other in every round, so a neighbour's
    burst of load slows both instead of only the one that happened to run during it.
    """
    rates: dict[str, list[float | None]] = {name: [] for name in measures}
    for _ in range(REPEAT):
        for name, measure in measures.items():
            rates[name].append(measure())
    return rates


def _best(got: list[float | None]) -> float | None:
    return None if None in got else max(r for r in got if r is not None)


def _round_ratio(rates: dict[str, list[float | None]], name: str, base: str) -> str:
    """The median over rounds of ``name``'s rate over its baseline's in the same round."""
    pairs = [(v, b) for v, b in zip(rates[name], rates[base], strict=True) if v and b]
    return f"{statistics.median(v / b for v, b in pairs):.2f}x" if pairs else "n/a"


def _median_ratio(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x" if ratios else "n/a"


def _cpu_ratio(name: str, base: str) -> str:
    """The baseline's least CPU per row over ``name``'s: above 1.00x, ``name`` costs less."""
    if not _CPU_US.get(name) or not _CPU_US.get(base):
        return "n/a"
    return f"{min(_CPU_US[base]) / min(_CPU_US[name]):.2f}x"


def main() -> int:
    """Run every measurement on the same Redis and print one table."""
    envs = _envelopes(ROWS)
    few = envs[:CONSUME]
    folder = Path(tempfile.mkdtemp(prefix="xsm-bench-eda-"))
    _purge()
    rates = _interleaved(
        {
            "publish": lambda: raw_publish(envs),
            "single": lambda: our_relay(folder, envs, batched=False),
            "publish_batched": lambda: raw_batched_publish(envs),
            "batched": lambda: our_relay(folder, envs, batched=True),
            "peer": lambda: peer_relay(folder, envs),
            "consume": lambda: raw_consume(few),
            "memory": lambda: dispatcher_rate(few, memory_dispatcher),
            "sqlite": lambda: dispatcher_rate(few, sqlite_dispatcher(folder)),
        }
    )
    best = {name: _best(got) for name, got in rates.items()}
    pair_ratios, pair_control, paired_rate = batch_by_batch(folder, envs)
    _purge()
    publish, publish_batched = best["publish"] or 1.0, best["publish_batched"] or 1.0
    single, batched, peer = best["single"], best["batched"], best["peer"] or 1.0
    consume, memory, sqlite = best["consume"] or 1.0, best["memory"], best["sqlite"]
    rows = [
        ["raw kombu publish", _rate(publish), "1.00x raw publish", "", "", "baseline"],
        [
            "relay, one publish per row",
            _rate(single),
            _ratio(single, publish),
            _round_ratio(rates, "single", "publish"),
            _cpu_ratio("single", "publish"),
            ">= 0.95x",
        ],
        [
            "raw kombu batched publish",
            _rate(publish_batched),
            "1.00x raw batched",
            "",
            "",
            "baseline",
        ],
        [
            "relay, batched (publish_many)",
            _rate(batched),
            _ratio(batched, publish_batched),
            _round_ratio(rates, "batched", "publish_batched"),
            _cpu_ratio("batched", "publish_batched"),
            "run by run (see below)",
        ],
        [
            f"relay, batched, batch by batch ({len(pair_ratios)} pairs)",
            _rate(paired_rate),
            "",
            _median_ratio(pair_ratios),
            "",
            ">= 0.75x raw batched",
        ],
        [
            "A/A control (raw batched / raw batched)",
            "",
            "",
            _median_ratio(pair_control),
            "",
            "1.00x: the pairing's noise",
        ],
        ["xstate-statemachine 0.11.0 relay", _rate(peer), _ratio(peer, publish), "", "", "peer"],
        ["batched relay vs 0.11.0", "", _ratio(batched, peer), "", "", ">= 5.00x"],
        ["raw kombu consume+ack", _rate(consume), "1.00x raw consume", "", "", "baseline"],
        [
            "dispatcher, inbox on, memory",
            _rate(memory),
            _ratio(memory, consume),
            "",
            "",
            ">= 0.50x",
        ],
        [
            "dispatcher, inbox on, SQLite",
            _rate(sqlite),
            _ratio(sqlite, consume),
            "",
            "",
            ">= 0.30x",
        ],
    ]
    print(
        f"Redis {REDIS}; {ROWS} rows per relay run, {CONSUME} envelopes consumed; "
        f"best of {REPEAT} runs\n"
    )
    headers = [
        "measurement",
        "per second",
        "ratio (bests)",
        "median ratio by round",
        "CPU per row, least (base/this)",
        "target",
    ]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
