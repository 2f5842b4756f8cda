"""The circuit breaker's chart, ``CIRCUIT_BREAKER_CONFIG``, and the logic it runs on.

The breaker is an ordinary chart so that it can be drawn, inspected and embedded in a
user's own machine; ``CircuitBreaker`` runs it on a ``SyncInterpreter``. All counters live
in the chart's context, and every guard reads only the context, so the chart behaves the
same whether the breaker drives it or a user's machine does.

Context keys: ``failures`` (consecutive failures while closed), ``failure_threshold``,
``failure_rate_threshold`` (None, or a rate in (0, 1]) over the last ``window_size``
outcomes kept in ``window`` (1 = failure), ``half_open_max_calls`` (probes in flight at
once), ``success_threshold`` (probe successes that close the circuit), ``probes_in_flight``,
``probe_successes`` and ``opened_count`` (lifetime trips).
"""

from __future__ import annotations

from typing import Any

from xsm_celery.checks import BREAKER_COOLDOWN_MS
from xsm_celery.engine import MachineLogic

__all__ = ["CIRCUIT_BREAKER_CONFIG", "check_cooldown", "circuit_breaker_logic", "record_outcome"]

#: The breaker chart: closed -> open on a tripping FAILURE, open -> half_open after the
#: named delay ``cooldown``, half_open -> closed on enough probe successes, -> open on a
#: failure. ``RESET`` is the operator override back to closed from anywhere.
CIRCUIT_BREAKER_CONFIG: dict[str, Any] = {
    "id": "circuitBreaker",
    "version": "1",
    "initial": "closed",
    "context": {
        "failures": 0,
        "failure_threshold": 5,
        "failure_rate_threshold": None,
        "window_size": 20,
        "window": [],
        "half_open_max_calls": 1,
        "success_threshold": 1,
        "probes_in_flight": 0,
        "probe_successes": 0,
        "opened_count": 0,
    },
    "states": {
        "closed": {
            "description": "Calls pass through; failures are counted.",
            "entry": "clearFailures",
            "on": {
                "SUCCESS": {"actions": "recordSuccess"},
                "FAILURE": [
                    {"guard": "shouldTrip", "target": "open", "actions": "recordFailure"},
                    {"actions": "recordFailure"},
                ],
                "RESET": {"actions": "clearFailures"},
            },
        },
        "open": {
            "description": "Calls are rejected until the cooldown elapses.",
            "tags": ["rejecting"],
            "entry": "countOpen",
            "after": {"cooldown": {"target": "half_open"}},
            "on": {"RESET": {"target": "closed"}},
        },
        "half_open": {
            "description": "A bounded number of probe calls is admitted.",
            "entry": "clearProbes",
            "on": {
                "PROBE": {"guard": "probeAvailable", "actions": "takeProbe"},
                "SUCCESS": [
                    {"guard": "probesSucceeded", "target": "closed"},
                    {"actions": "countProbeSuccess"},
                ],
                "FAILURE": {"target": "open"},
                "RELEASE": {"actions": "releaseProbe"},
                "RESET": {"target": "closed"},
            },
        },
    },
}


def check_cooldown(cooldown_ms: object) -> float:
    """``cooldown_ms`` as a float, refused outside ``checks.BREAKER_COOLDOWN_MS`` (0 to a day).

    NaN and inf would leave the circuit open for ever (the timer never fires); a negative
    cooldown would half-open at once. ``CircuitBreaker``, ``BreakerSettings`` and
    ``FleetBreaker`` all check it here, with the same range.
    """
    return BREAKER_COOLDOWN_MS.check("cooldown_ms", cooldown_ms)


def record_outcome(ctx: dict[str, Any], failed: bool) -> None:
    """Count one closed-state outcome in ``ctx``; shared by the chart and the fast path.

    The sliding window is kept only when a failure rate is configured, so the common
    consecutive-failures breaker pays nothing for it.
    """
    ctx["failures"] = ctx["failures"] + 1 if failed else 0
    if ctx["failure_rate_threshold"] is not None:
        window: list[int] = ctx["window"]
        window.append(1 if failed else 0)
        if len(window) > ctx["window_size"]:
            del window[0]


def _should_trip(ctx: dict[str, Any], event: Any) -> bool:
    """This failure (not yet counted) reaches the consecutive or the rate threshold."""
    if ctx["failures"] + 1 >= ctx["failure_threshold"]:
        return True
    rate = ctx["failure_rate_threshold"]
    if rate is None:
        return False
    window: list[int] = ctx["window"]
    size = ctx["window_size"]
    recent = [*window[-(size - 1) :], 1] if size > 1 else [1]
    return bool(len(recent) >= size and sum(recent) / len(recent) >= rate)


def _probe_available(ctx: dict[str, Any], event: Any) -> bool:
    """Another probe may start: a slot is free and it could still be needed to close."""
    in_flight = ctx["probes_in_flight"]
    return bool(
        in_flight < ctx["half_open_max_calls"]
        and ctx["probe_successes"] + in_flight < ctx["success_threshold"]
    )


def _probes_succeeded(ctx: dict[str, Any], event: Any) -> bool:
    """This success (not yet counted) is the last one needed to close."""
    return bool(ctx["probe_successes"] + 1 >= ctx["success_threshold"])


def _record_success(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    record_outcome(ctx, failed=False)


def _record_failure(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    record_outcome(ctx, failed=True)


def _clear_failures(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["failures"] = 0
    ctx["window"] = []


def _count_open(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["opened_count"] += 1


def _clear_probes(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["probes_in_flight"] = 0
    ctx["probe_successes"] = 0


def _take_probe(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["probes_in_flight"] += 1


def _count_probe_success(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["probe_successes"] += 1
    ctx["probes_in_flight"] = max(0, ctx["probes_in_flight"] - 1)


def _release_probe(interp: Any, ctx: dict[str, Any], event: Any, action: Any) -> None:
    ctx["probes_in_flight"] = max(0, ctx["probes_in_flight"] - 1)


def circuit_breaker_logic(cooldown_ms: float) -> MachineLogic:
    """The logic ``CIRCUIT_BREAKER_CONFIG`` names, with the cooldown bound as ``cooldown``.

    Raises:
        ValueError: ``cooldown_ms`` is NaN, infinite or negative.
    """
    return MachineLogic(
        actions={
            "recordSuccess": _record_success,
            "recordFailure": _record_failure,
            "clearFailures": _clear_failures,
            "countOpen": _count_open,
            "clearProbes": _clear_probes,
            "takeProbe": _take_probe,
            "countProbeSuccess": _count_probe_success,
            "releaseProbe": _release_probe,
        },
        guards={
            "shouldTrip": _should_trip,
            "probeAvailable": _probe_available,
            "probesSucceeded": _probes_succeeded,
        },
        delays={"cooldown": check_cooldown(cooldown_ms)},
    )
