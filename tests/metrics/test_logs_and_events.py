"""Structured log records, Celery event fields, and the worker settings that switch them on."""

from __future__ import annotations

import logging
import uuid

import pytest
from celery import Celery

from xsm_celery import hooks
from xsm_celery.celery import observability_config
from xsm_celery.errors import ConfigurationError
from xsm_celery.hooks import FactKind
from xsm_celery.metrics.events import EVENT_TYPES, event_fields
from xsm_celery.metrics.logs import LOGGER_NAME, FactLogger, log_fields


def test_a_retry_is_one_record_with_stable_fields(caplog: pytest.LogCaptureFixture) -> None:
    """A retry fact is one WARNING record whose extra fields carry the xsm_ names."""
    name = f"{LOGGER_NAME}.test-{uuid.uuid4().hex[:6]}"
    stop = hooks.subscribe(FactLogger(logging.getLogger(name)).handle)
    try:
        with caplog.at_level(logging.INFO, logger=name):
            hooks.emit(
                FactKind.RETRY_SCHEDULED,
                task="shop.charge",
                task_id="t-1",
                attempt=2,
                exception="ConnectionError",
                delay_s=1.5,
                durable=False,
            )
            hooks.emit(FactKind.TIMER_FIRED, purpose="retry", lag_s=0.1)
    finally:
        stop()
    records = [r for r in caplog.records if r.name == name]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.WARNING
    assert record.xsm_event == "retry_scheduled"  # type: ignore[attr-defined]
    assert record.xsm_task == "shop.charge"  # type: ignore[attr-defined]
    assert record.xsm_delay_s == 1.5  # type: ignore[attr-defined]
    assert "task=shop.charge" in record.getMessage()
    assert "exception=ConnectionError" in record.getMessage()


def test_log_fields_are_redacted_and_plain() -> None:
    """A secret-named field is masked, and a non-plain value (a carrier dict) is left out."""
    fields = log_fields(
        FactKind.DEAD_LETTER_WRITTEN,
        {"reason": "corrupt", "api_token": "tok_live_1", "carrier": {"a": 1}},
    )
    assert fields["xsm_event"] == "dead_letter_written"
    assert fields["xsm_reason"] == "corrupt"
    assert fields["xsm_api_token"] != "tok_live_1"
    assert "xsm_carrier" not in fields


def test_every_watched_fact_has_an_event_type() -> None:
    """Retries, give-ups, dead letters, replays, deferrals, transitions are Celery events."""
    assert {k.value for k in EVENT_TYPES} == {
        "retry_scheduled",
        "gave_up",
        "dead_letter_written",
        "dead_letter_replayed",
        "limit_deferred",
        "workflow_transition",
        "breaker_transition",
    }
    assert all(t.startswith("xsm-") for t in EVENT_TYPES.values())


def test_event_fields_drop_reserved_and_structured_values() -> None:
    """Fields the dispatcher sets, and anything not a plain value, stay out of the event."""
    fields = event_fields(
        {
            "type": "x",
            "hostname": "h",
            "task": "t",
            "traceparents": ("a",),
            "delay_s": 1.0,
            "note": "n" * 500,
        }
    )
    assert fields == {"task": "t", "delay_s": 1.0, "note": "n" * 200}


def test_worker_settings_are_validated() -> None:
    """A port or flag of the wrong type is refused with the setting's name; defaults are sane."""
    app = Celery("obs-config")
    config = observability_config(app)
    assert config.metrics_port is None
    assert config.log_facts is True
    assert config.send_events is False
    app.conf.worker_send_task_events = True
    assert observability_config(app).send_events is True
    app.conf.xsm_metrics_port = "9808"
    with pytest.raises(ConfigurationError, match="xsm_metrics_port"):
        observability_config(app)
    app.conf.xsm_metrics_port = 9808
    app.conf.xsm_tracing = "yes"
    with pytest.raises(ConfigurationError, match="xsm_tracing"):
        observability_config(app)


def test_the_new_settings_are_known_keys() -> None:
    """read_settings accepts the exporter settings instead of refusing them as unknown."""
    from xsm_celery.celery import read_settings

    app = Celery("obs-keys")
    app.conf.update(
        xsm_metrics_port=9808,
        xsm_metrics_addr="0.0.0.0",
        xsm_tracing=True,
        xsm_send_events=True,
        xsm_log_facts=False,
    )
    assert read_settings(app) is not None
