"""xsm_celery: resilient Celery work driven by small statecharts.

The top level re-exports the statechart engine and the error tree; the resilience patterns
live in ``xsm_celery.patterns``, event-driven plumbing in ``xsm_celery.eda``, stores in
``xsm_celery.persistence`` and the integrations in ``xsm_celery.celery``, ``.kombu``,
``.sqlalchemy``, ``.django`` and ``.redis``.
"""

from __future__ import annotations

from xsm_celery.engine import (
    PRIVATE_CONTEXT_PREFIX,
    Event,
    Interpreter,
    LoggingInspector,
    Machine,
    MachineLogic,
    Plugin,
    PluginBase,
    Receipt,
    SimulatedClock,
    SyncInterpreter,
    WallClock,
    create_machine,
    from_callback,
    public_context,
    redact,
)
from xsm_celery.errors import (
    AsyncServiceError,
    BrokerError,
    ChartError,
    ConfigurationError,
    EnvelopeError,
    ExecutionError,
    ImplementationMissingError,
    InterpreterStoppedError,
    InvalidConfigError,
    InvalidEventError,
    MissingExtraError,
    NotSupportedError,
    PolicyError,
    ReplayRefusedError,
    RunawayChainError,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotMismatchError,
    SnapshotTooLargeError,
    StateNotFoundError,
    StoreError,
    XsmError,
    XStateMachineError,
)

__all__ = [
    # Engine
    "Event",
    "Interpreter",
    "LoggingInspector",
    "Machine",
    "MachineLogic",
    "Plugin",
    "PluginBase",
    "PRIVATE_CONTEXT_PREFIX",
    "Receipt",
    "SimulatedClock",
    "SyncInterpreter",
    "WallClock",
    "create_machine",
    "from_callback",
    "public_context",
    "redact",
    # Errors (the phase bases first)
    "ChartError",
    "ExecutionError",
    "PolicyError",
    "StoreError",
    "EnvelopeError",
    "BrokerError",
    "ReplayRefusedError",
    "ConfigurationError",
    "AsyncServiceError",
    "ImplementationMissingError",
    "InterpreterStoppedError",
    "InvalidConfigError",
    "InvalidEventError",
    "MissingExtraError",
    "NotSupportedError",
    "RunawayChainError",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotMismatchError",
    "SnapshotTooLargeError",
    "StateNotFoundError",
    "XStateMachineError",
    "XsmError",
]

__version__ = "0.1.0"
