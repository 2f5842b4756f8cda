"""Fixtures for the engine tests: logs captured, and each behaviour test run on both drivers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from tests.engine.drivers import set_driver

DRIVERS = ("sync", "async")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test of a module that builds interpreters with ``Interp`` on both drivers."""
    if "engine_driver" in metafunc.fixturenames and hasattr(metafunc.module, "Interp"):
        metafunc.parametrize("engine_driver", DRIVERS, indirect=True)


@pytest.fixture(autouse=True)
def engine_driver(request: pytest.FixtureRequest) -> Iterator[str]:
    """Select the interpreter ``Interp(...)`` builds; the async one gets a private loop."""
    name = getattr(request, "param", "sync")
    loop = asyncio.new_event_loop() if name == "async" else None
    set_driver(name, loop)
    try:
        yield name
    finally:
        set_driver("sync", None)
        if loop is not None:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()
            asyncio.set_event_loop(None)


@pytest.fixture(autouse=True)
def _engine_logs_are_captured(caplog: pytest.LogCaptureFixture) -> None:
    """Let WARNING records of the engine reach caplog whatever earlier tests did to logging.

    A Celery worker started by another area's tests leaves the root logger at ERROR, which
    would hide the engine's warnings from the tests that check them.
    """
    caplog.set_level(logging.WARNING, logger="xsm_celery")
