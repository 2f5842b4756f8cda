"""Partition routing: stable, in range, and the queue names producers and consumers share."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xsm_celery.kombu import Partitioning, partition_of, queue_name


@given(st.text(min_size=1, max_size=200), st.integers(min_value=1, max_value=1024))
def test_partition_is_in_range_and_deterministic(subject: str, partitions: int) -> None:
    """Every subject maps to one partition in 0..n-1, the same one each time."""
    first = partition_of(subject, partitions)
    assert 0 <= first < partitions
    assert partition_of(subject, partitions) == first


def test_partition_is_the_same_in_another_process() -> None:
    """The hash is not Python's salted hash(): another interpreter agrees."""
    code = "from xsm_celery.kombu import partition_of; print(partition_of('order-42', 16))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(other.stdout) == partition_of("order-42", 16)


def test_subjects_spread_over_partitions() -> None:
    """A thousand subjects use every one of eight partitions, none with over a quarter."""
    counts = [0] * 8
    for n in range(1000):
        counts[partition_of(f"o-{n}", 8)] += 1
    assert min(counts) > 0
    assert max(counts) < 250


def test_no_subject_goes_to_partition_zero() -> None:
    """Envelopes without a subject have no order to keep and use partition 0."""
    assert partition_of(None, 8) == 0
    assert partition_of("", 8) == 0


def test_queue_names() -> None:
    """One partition is the topic's own queue; more are <topic>.p<n>."""
    assert queue_name("orders", 0, 1) == "orders"
    assert queue_name("orders", 3, 4) == "orders.p3"
    with pytest.raises(ValueError):
        queue_name("orders", 4, 4)


def test_partitioning_lists_publish_and_consume_queues() -> None:
    """A consumer reads its share; producers route by subject into all partitions."""
    split = Partitioning(4, consume=[3, 1])
    assert split.consume_queues("t") == ["t.p1", "t.p3"]
    assert split.all_queues("t") == ["t.p0", "t.p1", "t.p2", "t.p3"]
    assert split.publish_queue("t", "o-42") == f"t.p{partition_of('o-42', 4)}"


@pytest.mark.parametrize(
    ("partitions", "consume"), [(0, None), (True, None), (2, [2]), (2, []), (2, [-1])]
)
def test_bad_partitioning_is_refused(partitions: int, consume: list[int] | None) -> None:
    """Zero partitions, a bool, an unknown or empty share are refused up front."""
    with pytest.raises(ValueError):
        Partitioning(partitions, consume)
