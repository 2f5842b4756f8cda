"""Plugins: observers of an interpreter's life, with no-op hooks to override.

A plugin sees events, transitions, actions, guards and services as they happen. It cannot
break the machine it watches: a hook that raises is logged and reported to the other plugins'
``on_plugin_error``, and the step goes on. Hook names and arguments follow 0.11.0, so
plugins written for it move over unchanged.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Protocol

from xsm_celery.engine.redact import DEFAULT_REDACT_KEYS, redact
from xsm_celery.errors import ArgumentTypeError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from xsm_celery.engine.chart import ActionDef, InvokeDef, StateNode, Transition
    from xsm_celery.engine.events import Event, Receipt
    from xsm_celery.engine.machine import Machine

__all__ = [
    "InterpreterView",
    "LoggingInspector",
    "Plugin",
    "PluginBase",
    "clear_global_plugins",
    "global_plugins",
    "register_global",
    "replaced_plugins",
    "unregister_global",
]

logger = logging.getLogger("xsm_celery.engine")


class InterpreterView(Protocol):
    """What every hook receives as ``i``: the interpreter it observes, as far as a plugin uses it.

    Both interpreters (and a child machine) satisfy it; a plugin that needs more of the
    interpreter than this names it in its own annotation. The hooks run on the thread running
    the step, so a plugin may read and write ``context`` in place.
    """

    @property
    def id(self) -> str:
        """The machine's id, or the actor id a child machine is known by."""

    @property
    def machine(self) -> Machine:
        """The chart the interpreter runs."""

    @property
    def status(self) -> str:
        """``not_started``, ``running``, ``done`` or ``stopped``."""

    @property
    def context(self) -> dict[str, Any]:
        """The live context (actions mutate it in place)."""

    @property
    def current_state_ids(self) -> set[str]:
        """Full dotted ids of the active leaves."""

    @property
    def store_key(self) -> str | None:
        """The key the instance is stored under, inside ``persisted()``; else None."""

    def wall_now(self) -> float:
        """Wall-clock time of the interpreter's clock, in epoch seconds."""

    def get_snapshot(self) -> str:
        """The machine at rest as a JSON string."""


class Plugin(Protocol):
    """What the interpreter calls on a plugin: every hook, each a no-op by default.

    ``PluginBase`` subclasses it explicitly and so inherits the no-ops; a class that does not
    subclass either still conforms when it defines every hook (mypy checks it structurally).
    """

    def on_interpreter_start(self, i: InterpreterView) -> None:
        """The interpreter started, before the initial states are entered."""
        return

    def on_interpreter_stop(self, i: InterpreterView) -> None:
        """The interpreter stopped; timers are cancelled and actors cleaned up."""
        return

    def on_before_send(self, i: InterpreterView, event: Event) -> Receipt | None:
        """A caller sent ``event``; return a Receipt to answer it without running it."""
        return None

    def on_event_received(self, i: InterpreterView, event: Event) -> None:
        """An event (caller's or engine-minted) is about to be processed."""
        return

    def on_event_processed(self, i: InterpreterView, event: Event, receipt: Receipt) -> None:
        """An event and its eventless transitions have settled; ``receipt`` is the outcome."""
        return

    def on_event_dropped(self, i: InterpreterView, event: Event, reason: str) -> None:
        """An event was not processed: ``not_running`` or ``engine_event`` (a forged name)."""
        return

    def on_transition(
        self,
        i: InterpreterView,
        from_states: set[StateNode],
        to_states: set[StateNode],
        transition: Transition,
    ) -> None:
        """A transition was taken; the sets are the active states before and after."""
        return

    def on_action_execute(self, i: InterpreterView, action: ActionDef) -> None:
        """An action is about to run."""
        return

    def on_action_error(self, i: InterpreterView, action: ActionDef, error: BaseException) -> None:
        """An action raised; the rest of its list was skipped and the machine goes on."""
        return

    def on_guard_evaluated(
        self, i: InterpreterView, guard_name: str, event: Event, result: bool
    ) -> None:
        """A guard was evaluated (a guard that raised counts as False)."""
        return

    def on_guard_error(
        self, i: InterpreterView, guard_name: str, event: Event, error: BaseException
    ) -> None:
        """A guard raised; it was treated as False."""
        return

    def on_service_start(self, i: InterpreterView, invocation: InvokeDef) -> None:
        """A service or callback actor is starting."""
        return

    def on_service_done(self, i: InterpreterView, invocation: InvokeDef, result: Any) -> None:
        """A service returned; ``result`` becomes ``onDone``'s ``event.data``."""
        return

    def on_service_error(
        self, i: InterpreterView, invocation: InvokeDef, error: BaseException
    ) -> None:
        """A service (or an actor's setup) raised; ``error`` becomes ``onError``'s data."""
        return

    def on_plugin_error(
        self, i: InterpreterView, plugin: Any, hook: str, error: BaseException
    ) -> None:
        """Another plugin's hook raised; it was contained."""
        return

    def on_done(self, i: InterpreterView, output: Any) -> None:
        """The machine reached a top-level final state."""
        return


class PluginBase(Plugin):
    """Base class of plugins: every hook of :class:`Plugin` is a no-op; override the ones you need.

    ``i`` is the interpreter. Hooks are called synchronously on the thread running the step.
    """


_GLOBAL: list[Any] = []
_GLOBAL_LOCK = threading.Lock()


def register_global(plugin: Any) -> None:
    """Attach ``plugin`` to every interpreter created from now on (not to existing ones).

    Registering the same object twice is a no-op.
    """
    with _GLOBAL_LOCK:
        if all(p is not plugin for p in _GLOBAL):
            _GLOBAL.append(plugin)


def unregister_global(plugin: Any) -> bool:
    """Stop attaching ``plugin`` to new interpreters; whether it was registered."""
    with _GLOBAL_LOCK:
        for index, existing in enumerate(_GLOBAL):
            if existing is plugin:
                del _GLOBAL[index]
                return True
    return False


def global_plugins() -> list[Any]:
    """A copy of the global registry, in registration order."""
    if not _GLOBAL:
        return []
    with _GLOBAL_LOCK:
        return list(_GLOBAL)


def clear_global_plugins() -> None:
    """Empty the global registry (for test teardown)."""
    with _GLOBAL_LOCK:
        _GLOBAL.clear()


def replaced_plugins(plugins: Any) -> list[Any]:
    """The list an interpreter's ``plugins = [...]`` assignment installs, duplicates dropped.

    Raises:
        ArgumentTypeError: ``plugins`` is not a list or tuple.
    """
    if not isinstance(plugins, (list, tuple)):
        raise ArgumentTypeError(
            f"plugins must be assigned a list of plugin objects, got {type(plugins).__name__}; "
            "use interp.use(plugin) to add one"
        )
    kept: list[Any] = []
    for plugin in plugins:
        if all(p is not plugin for p in kept):
            kept.append(plugin)
    return kept


class LoggingInspector(PluginBase):
    """Logs what a machine does, with secrets redacted from payloads and context.

    Args:
        logger_name: Logger to write to.
        level: Level of the routine records (errors are always ERROR or WARNING).
        redact_keys: Key fragments to mask; defaults to ``DEFAULT_REDACT_KEYS``.
        log_context: Also log the (redacted) context after each event.
    """

    def __init__(
        self,
        logger_name: str = "xsm_celery.inspector",
        level: int = logging.INFO,
        redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS,
        log_context: bool = False,
    ) -> None:
        self.log = logging.getLogger(logger_name)
        self.level = level
        self.redact_keys = tuple(redact_keys)
        self.log_context = log_context

    def _clean(self, value: Any) -> Any:
        return redact(value, self.redact_keys)

    def on_interpreter_start(self, i: InterpreterView) -> None:
        self.log.log(self.level, "[%s] started", i.id)

    def on_interpreter_stop(self, i: InterpreterView) -> None:
        self.log.log(self.level, "[%s] stopped", i.id)

    def on_event_received(self, i: InterpreterView, event: Event) -> None:
        self.log.log(self.level, "[%s] event %s %s", i.id, event.type, self._clean(event.payload))

    def on_event_processed(self, i: InterpreterView, event: Event, receipt: Receipt) -> None:
        if self.log_context:
            self.log.log(
                self.level, "[%s] after %s: context %s", i.id, event.type, self._clean(i.context)
            )

    def on_transition(
        self,
        i: InterpreterView,
        from_states: set[StateNode],
        to_states: set[StateNode],
        transition: Transition,
    ) -> None:
        before = sorted(s.id for s in from_states if s.is_leaf)
        after = sorted(s.id for s in to_states if s.is_leaf)
        self.log.log(self.level, "[%s] %s -> %s on %s", i.id, before, after, transition.event)

    def on_action_execute(self, i: InterpreterView, action: ActionDef) -> None:
        self.log.log(self.level, "[%s] action %s", i.id, action.type)

    def on_action_error(self, i: InterpreterView, action: ActionDef, error: BaseException) -> None:
        self.log.error(
            "[%s] action %s raised %s: %s",
            i.id,
            action.type,
            type(error).__name__,
            self._clean(str(error)),
        )

    def on_guard_evaluated(
        self, i: InterpreterView, guard_name: str, event: Event, result: bool
    ) -> None:
        self.log.log(self.level, "[%s] guard %s -> %s", i.id, guard_name, result)

    def on_service_start(self, i: InterpreterView, invocation: InvokeDef) -> None:
        self.log.log(
            self.level, "[%s] service %s started (%s)", i.id, invocation.src, invocation.id
        )

    def on_service_done(self, i: InterpreterView, invocation: InvokeDef, result: Any) -> None:
        self.log.log(
            self.level, "[%s] service %s done: %s", i.id, invocation.src, self._clean(result)
        )

    def on_service_error(
        self, i: InterpreterView, invocation: InvokeDef, error: BaseException
    ) -> None:
        self.log.warning(
            "[%s] service %s failed: %s: %s", i.id, invocation.src, type(error).__name__, error
        )

    def on_done(self, i: InterpreterView, output: Any) -> None:
        self.log.log(self.level, "[%s] done, output %s", i.id, self._clean(output))


def dispatch(i: InterpreterView, plugins: list[Any], hook: str, args: tuple[Any, ...]) -> Any:
    """Call ``hook`` on every plugin, containing failures; the first non-None result wins.

    Plugins need not subclass :class:`PluginBase`: a missing hook is skipped.
    """
    first = None
    for plugin in plugins:
        method = getattr(plugin, hook, None)
        if method is None:
            continue
        try:
            result = method(i, *args)
        except Exception as exc:
            report_plugin_error(i, plugins, plugin, hook, exc)
            continue
        if result is not None and first is None:
            first = result
    return first


def report_plugin_error(
    i: InterpreterView, plugins: list[Any], plugin: Any, hook: str, error: Exception
) -> None:
    """Log a failed hook and tell the other plugins; a failure in that report is only logged."""
    logger.error(
        "plugin %s raised in %s on machine %r; contained",
        type(plugin).__name__,
        hook,
        i.id,
        exc_info=error,
    )
    for other in plugins:
        if other is plugin:
            continue
        method = getattr(other, "on_plugin_error", None)
        if method is None:
            continue
        try:
            method(i, plugin, hook, error)
        except Exception:
            logger.exception("plugin %s raised in on_plugin_error", type(other).__name__)
