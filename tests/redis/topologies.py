"""Start a real Redis topology for a test: skipped locally, failed under CI, when it cannot run.

The topologies themselves (a Redis Cluster, a Sentinel group, a TLS Redis) live in
``bench.topologies`` so that the benchmarks measure on the same servers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

import pytest

from bench.topologies import TopologyUnavailableError
from tests import services

__all__ = ["or_skip", "started"]

T = TypeVar("T")


class _Startable(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=_Startable)


def or_skip(start: Callable[[], T]) -> T:
    """``start()``'s result; a skip (locally) or a failure (under CI) if the topology cannot run."""
    try:
        return start()
    except TopologyUnavailableError as exc:
        if services.in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


def started(topology: S) -> Iterator[S]:
    """Start ``topology`` for a fixture to yield, and stop it afterwards, whatever happens."""
    try:
        or_skip(topology.start)
        yield topology
    finally:
        topology.stop()
