"""Fixtures for the engine tests."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _engine_logs_are_captured(caplog: pytest.LogCaptureFixture) -> None:
    """Let WARNING records of the engine reach caplog whatever earlier tests did to logging.

    A Celery worker started by another area's tests leaves the root logger at ERROR, which
    would hide the engine's warnings from the tests that check them.
    """
    caplog.set_level(logging.WARNING, logger="xsm_celery")
