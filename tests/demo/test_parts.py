"""The demo's parts: the flaky upstream, the progress log, the board and the embedded broker."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sqlite3
import stat
import threading
import time
from pathlib import Path
from queue import Empty

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kombu import Connection

from tests.isolation import run_fresh
from xsm_celery.demo.board import Board
from xsm_celery.demo.broker import POLLING_INTERVAL_S, TRANSPORT
from xsm_celery.demo.progress import ProgressEvent, ProgressLog
from xsm_celery.demo.upstream import Behaviour, FlakyUpstream, MalformedQuote, UpstreamTimeout


class TestFlakyUpstream:
    """The scripted quote service."""

    def test_a_flaky_order_times_out_n_times_then_answers(self, tmp_path: Path) -> None:
        """With fail_times=2, calls 1 and 2 time out and call 3 returns a price."""
        upstream = FlakyUpstream(tmp_path / "u.db")
        upstream.script("A-1", Behaviour("flaky", 2))
        for _ in range(2):
            with pytest.raises(UpstreamTimeout):
                upstream.quote("A-1")
        assert upstream.quote("A-1") > 0
        assert upstream.calls("A-1") == 3

    def test_a_down_order_always_times_out_until_healed(self, tmp_path: Path) -> None:
        """A down order times out every time; heal() makes the next call answer."""
        upstream = FlakyUpstream(tmp_path / "u.db")
        upstream.script("A-2", Behaviour("down"))
        for _ in range(5):
            with pytest.raises(UpstreamTimeout):
                upstream.quote("A-2")
        upstream.heal("A-2")
        assert upstream.quote("A-2") > 0

    def test_a_malformed_answer_is_a_value_error(self, tmp_path: Path) -> None:
        """The malformed answer is a ValueError, which the demo task gives up on at once."""
        upstream = FlakyUpstream(tmp_path / "u.db")
        upstream.script("A-3", Behaviour("malformed"))
        with pytest.raises(MalformedQuote):
            upstream.quote("A-3")
        assert issubclass(MalformedQuote, ValueError)
        assert issubclass(UpstreamTimeout, ConnectionError)

    def test_every_process_sees_one_upstream(self, tmp_path: Path) -> None:
        """Call counts are shared through the file, as worker processes need."""
        FlakyUpstream(tmp_path / "u.db").script("A-4", Behaviour("flaky", 1))
        with pytest.raises(UpstreamTimeout):
            FlakyUpstream(tmp_path / "u.db").quote("A-4")
        assert FlakyUpstream(tmp_path / "u.db").quote("A-4") > 0

    def test_a_crash_order_kills_the_calling_process(self, tmp_path: Path) -> None:
        """The crash behaviour ends the calling process with SIGKILL, as the demo needs."""
        FlakyUpstream(tmp_path / "u.db").script("A-5", Behaviour("crash"))
        process = multiprocessing.get_context("fork").Process(
            target=_quote, args=(tmp_path / "u.db", "A-5")
        )
        process.start()
        process.join(30)
        assert process.exitcode == -signal.SIGKILL

    def test_the_file_is_private(self, tmp_path: Path) -> None:
        """The upstream's file is created mode 0600."""
        FlakyUpstream(tmp_path / "u.db")
        assert stat.S_IMODE((tmp_path / "u.db").stat().st_mode) == 0o600


def _quote(path: Path, order_id: str) -> None:
    FlakyUpstream(path).quote(order_id)


class TestProgressLog:
    """The event log between the worker's processes and the runner."""

    def test_events_come_back_in_order_after_a_sequence_number(self, tmp_path: Path) -> None:
        """since(n) returns the events appended after event n, oldest first."""
        log = ProgressLog(tmp_path / "p.db")
        log.add("t1", "A-1", "started", attempt=1)
        log.add("t1", "A-1", "retrying", attempt=1, delay_ms=250.5, detail="boom")
        first, second = log.since(0)
        assert (first.kind, second.kind, second.delay_ms, second.detail) == (
            "started",
            "retrying",
            250.5,
            "boom",
        )
        assert log.since(first.seq) == [second]

    def test_processes_append_to_one_log(self, tmp_path: Path) -> None:
        """Events written by forked processes are all read back."""
        run_fresh(__name__, "fork_four_appenders", str(tmp_path / "p.db"))
        assert len(ProgressLog(tmp_path / "p.db").since(0)) == 40


def fork_four_appenders(path: str) -> None:
    """Four forked processes append ten events each to one progress log."""
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_append, args=(Path(path), n)) for n in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(30)
        assert process.exitcode == 0


def _append(path: Path, n: int) -> None:
    log = ProgressLog(path)
    for i in range(10):
        log.add(f"t{n}", f"A-{n}", "started", attempt=i)


def _event(
    seq: int,
    kind: str,
    attempt: int = 1,
    *,
    delay_ms: float | None = None,
    detail: str = "",
    task_id: str = "t1",
) -> ProgressEvent:
    return ProgressEvent(seq, task_id, "A-1", kind, attempt, delay_ms, detail)


class TestBoard:
    """The live view's model."""

    def test_a_retry_then_success(self) -> None:
        """started, retrying and succeeded move the row and produce a line each step."""
        board = Board()
        board.add("A-1", "times out once", "t1")
        lines = board.apply(
            [
                _event(1, "started"),
                _event(2, "retrying", delay_ms=412.4, detail="UpstreamTimeout: slow"),
            ]
        )
        row = board.rows["t1"]
        assert (row.status, row.attempt, row.next_delay_ms) == ("retrying", 1, 412.4)
        assert lines == ["A-1              attempt 1: UpstreamTimeout: slow -> retry in 412 ms"]
        board.apply([_event(3, "started", attempt=2), _event(4, "succeeded", 2, detail="q 9")])
        assert (row.status, row.attempt, row.next_delay_ms) == ("succeeded", 2, None)
        assert board.done()

    def test_a_killed_worker_and_a_dead_letter(self) -> None:
        """A redelivery shows the lost worker; a failure is final and dead-lettered."""
        board = Board()
        board.add("A-7", "kills the worker", "t1")
        lines = board.apply([_event(1, "started"), _event(2, "redelivered")])
        assert board.rows["t1"].status == "worker died"
        assert "worker process was killed" in lines[0]
        assert not board.done()
        lines = board.apply([_event(3, "failed", 4, detail="WorkerLost: the worker died")])
        assert board.rows["t1"].status == "dead-lettered"
        assert lines == ["A-7              attempt 4: gave up: WorkerLost -> dead letter"]
        assert board.done()

    def test_events_of_other_tasks_are_ignored(self) -> None:
        """The board shows only the tasks it was given."""
        board = Board()
        board.add("A-1", "answers", "t1")
        assert board.apply([_event(1, "succeeded", task_id="other")]) == []
        assert board.pending() == [board.rows["t1"]]

    @given(
        st.lists(st.sampled_from(["started", "redelivered", "retrying"]), max_size=20),
        st.lists(st.integers(1, 10), min_size=20, max_size=20),
    )
    def test_the_attempt_shown_never_goes_back(self, kinds: list[str], attempts: list[int]) -> None:
        """Whatever order events arrive in, the attempt column is the highest one seen."""
        board = Board()
        board.add("A-1", "x", "t1")
        for seq, (kind, attempt) in enumerate(zip(kinds, attempts, strict=False), start=1):
            board.apply([_event(seq, kind, attempt)])
        assert board.rows["t1"].attempt == max(attempts[: len(kinds)], default=0)
        assert not board.done()


class TestEmbeddedBroker:
    """kombu's SQLAlchemy transport with the demo's fixes."""

    def test_a_requeued_message_is_flagged_redelivered_where_celery_reads_it(
        self, tmp_path: Path
    ) -> None:
        """After a requeue, delivery_info['redelivered'] is True (kombu's own leaves it out)."""
        with Connection(f"sqlite:///{tmp_path / 'b.db'}", transport=TRANSPORT) as conn:
            queue = conn.SimpleQueue("q")
            queue.put({"n": 1})
            first = queue.get(timeout=5)
            assert not first.delivery_info.get("redelivered")
            first.requeue()
            again = queue.get(timeout=5)
            assert again.payload == {"n": 1}
            assert again.delivery_info["redelivered"] is True
            again.ack()

    def test_it_polls_every_100_ms(self, tmp_path: Path) -> None:
        """The transport polls an empty queue ten times a second."""
        with Connection(f"sqlite:///{tmp_path / 'b.db'}", transport=TRANSPORT) as conn:
            assert conn.transport.polling_interval == POLLING_INTERVAL_S == 0.1

    def test_one_channel_used_from_two_threads_loses_nothing(self, tmp_path: Path) -> None:
        """A publisher thread and a consumer thread share a channel safely (as a worker does)."""
        with Connection(f"sqlite:///{tmp_path / 'b.db'}", transport=TRANSPORT) as conn:
            channel = conn.default_channel
            channel.queue_declare("q")
            received: list[object] = []

            def publish() -> None:
                for n in range(100):
                    channel._put("q", {"body": n, "properties": {}})

            thread = threading.Thread(target=publish)
            thread.start()
            for _ in range(2000):
                if len(received) == 100:
                    break
                try:
                    received.append(channel._get("q"))
                except Empty:  # the publisher has not caught up
                    continue
            thread.join(30)
            assert len(received) == 100

    def test_a_pool_process_forked_while_the_consumer_polls_can_still_publish(
        self, tmp_path: Path
    ) -> None:
        """A fork waits for the consumer's write lock, so the child is not locked out for ever.

        SQLite keeps lock state per process: a child forked while another thread held the
        write lock inherits it as held by a connection it never uses, and none of its own
        connections can ever write. Celery's supervisor thread forks replacement pool
        processes while the consumer thread polls, which is how the demo lost a callback.
        """
        path = tmp_path / "b.db"
        with Connection(f"sqlite:///{path}", transport=TRANSPORT) as conn:
            channel = conn.default_channel
            channel.queue_declare("q")
            stop = threading.Event()

            def poll() -> None:
                while not stop.is_set():
                    with contextlib.suppress(Empty):
                        channel._get("q")

            poller = threading.Thread(target=poll)
            poller.start()
            try:
                codes = [_fork_and_write(path) for _ in range(10)]
            finally:
                stop.set()
                poller.join(10)
        assert codes == [0] * 10, "a forked child could not take the write lock"

    def test_the_broker_file_is_not_world_readable_when_the_demo_creates_it(
        self, tmp_path: Path
    ) -> None:
        """The runner creates broker.db mode 0600 before kombu opens it (it holds raw args)."""
        from xsm_celery.demo.runner import _fresh

        old = os.umask(0)
        try:
            _fresh(tmp_path)
        finally:
            os.umask(old)
        assert stat.S_IMODE((tmp_path / "broker.db").stat().st_mode) == 0o600


def _fork_and_write(path: Path) -> int:
    """Fork; the child takes SQLite's write lock on ``path`` and exits 0 (1 if it cannot).

    A child that hangs (a lock inherited held) is killed after 5 s and counts as failed.
    """
    time.sleep(0.003)  # let the polling thread get back into its loop
    pid = os.fork()
    if pid == 0:  # pragma: no cover (runs in the child)
        code = 1
        try:
            db = sqlite3.connect(path, timeout=2, isolation_level=None)
            db.execute("BEGIN IMMEDIATE")
            db.execute("ROLLBACK")
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1
