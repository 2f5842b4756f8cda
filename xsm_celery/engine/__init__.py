"""The statechart engine: charts, machines, interpreters, clocks, plugins and snapshots.

Standard library only. The public names are re-exported from ``xsm_celery`` too.
"""

from __future__ import annotations

from xsm_celery.engine.actions import (
    ActionEnqueuer,
    assign,
    cancel,
    choose,
    emit,
    enqueue_actions,
    escalate,
    forward_to,
    log,
    pure,
    raise_,
    send_parent,
    send_to,
    spawn_child,
    stop_child,
)
from xsm_celery.engine.aio import Interpreter
from xsm_celery.engine.chart import ActionDef, AfterDef, GuardDef, InvokeDef, StateNode, Transition
from xsm_celery.engine.clock import Clock, RealClock, SimulatedClock, TimerHandle, WallClock
from xsm_celery.engine.events import (
    ENGINE_EVENT_PREFIXES,
    EngineEvent,
    Event,
    Receipt,
    is_engine_event_type,
)
from xsm_celery.engine.hashing import structure_hash
from xsm_celery.engine.invoke import ActorRef, CallbackLogic, from_callback
from xsm_celery.engine.logic import MachineLogic
from xsm_celery.engine.machine import Machine, create_machine, load_chart
from xsm_celery.engine.plugins import (
    InterpreterView,
    LoggingInspector,
    Plugin,
    PluginBase,
    clear_global_plugins,
    global_plugins,
    register_global,
    unregister_global,
)
from xsm_celery.engine.pure_step import (
    PureSnapshot,
    get_initial_snapshot,
    get_next_snapshot,
    initial_transition,
    pure_transition,
)
from xsm_celery.engine.redact import (
    DEFAULT_REDACT_KEYS,
    PRIVATE_CONTEXT_PREFIX,
    is_private_context_key,
    public_context,
    redact,
)
from xsm_celery.engine.snapshot import DEFAULT_MAX_SNAPSHOT_BYTES
from xsm_celery.engine.sync import SyncInterpreter
from xsm_celery.engine.waiting import to_promise, wait_for, wait_for_sync

__all__ = [
    # Machines
    "Machine",
    "MachineLogic",
    "create_machine",
    "load_chart",
    "structure_hash",
    # Chart model
    "ActionDef",
    "AfterDef",
    "GuardDef",
    "InvokeDef",
    "StateNode",
    "Transition",
    # Interpreters
    "Interpreter",
    "SyncInterpreter",
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "to_promise",
    "wait_for",
    "wait_for_sync",
    # Pure transitions
    "PureSnapshot",
    "get_initial_snapshot",
    "get_next_snapshot",
    "initial_transition",
    "pure_transition",
    # Built-in action creators
    "ActionEnqueuer",
    "assign",
    "cancel",
    "choose",
    "emit",
    "enqueue_actions",
    "escalate",
    "forward_to",
    "log",
    "pure",
    "raise_",
    "send_parent",
    "send_to",
    "spawn_child",
    "stop_child",
    # Events
    "ENGINE_EVENT_PREFIXES",
    "EngineEvent",
    "Event",
    "Receipt",
    "is_engine_event_type",
    # Actors
    "ActorRef",
    "CallbackLogic",
    "from_callback",
    # Clocks
    "Clock",
    "RealClock",
    "SimulatedClock",
    "TimerHandle",
    "WallClock",
    # Plugins
    "InterpreterView",
    "LoggingInspector",
    "Plugin",
    "PluginBase",
    "clear_global_plugins",
    "global_plugins",
    "register_global",
    "unregister_global",
    # Redaction
    "DEFAULT_REDACT_KEYS",
    "PRIVATE_CONTEXT_PREFIX",
    "is_private_context_key",
    "public_context",
    "redact",
]
