"""Reachability of the local services that integration tests use.

A test that needs a service calls ``require(...)``: on a developer machine a service that is
down skips the test, but with ``CI=true`` it fails, so CI can never go green by skipping.
"""

from __future__ import annotations

import os
import socket

import pytest

POSTGRES_URL = os.environ.get("XSM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("XSM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
RABBITMQ_URL = os.environ.get("XSM_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")

PORTS = {"postgres": 5432, "redis": 6379, "rabbitmq": 5672}


def in_ci() -> bool:
    """Whether the suite runs under CI, where a missing service is a failure."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def reachable(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    """Whether a TCP connection to host:port opens within the timeout."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require(service: str) -> None:
    """Skip (locally) or fail (under CI) when ``service`` is not listening."""
    port = PORTS[service]
    if reachable(port):
        return
    message = f"{service} is not reachable on 127.0.0.1:{port}; .ci/run starts it"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)
