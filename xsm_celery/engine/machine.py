"""create_machine(): validate a chart, bind its logic, and freeze the result.

Validation happens here, once, so that a broken chart fails where it is defined (at import or
start-up) with the path of the bad node, not on the first event that happens to reach it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from xsm_celery.engine import mermaid
from xsm_celery.engine.build import TreeBuilder
from xsm_celery.engine.builtins import builtin_action, canonical_builtin, check_params
from xsm_celery.engine.chart import (
    ActionDef,
    AfterDef,
    GuardDef,
    InvokeDef,
    StateNode,
    Transition,
)
from xsm_celery.engine.context_model import check_context_depth
from xsm_celery.engine.context_model import context_model as model_validator
from xsm_celery.engine.hashing import structure_hash
from xsm_celery.engine.logic import MachineLogic, accepts_params
from xsm_celery.engine.redact import public_context
from xsm_celery.engine.targets import (
    build_handler_tables,
    resolve_history_defaults,
    resolve_transitions,
)
from xsm_celery.errors import (
    ArgumentTypeError,
    ConfigurationError,
    ImplementationMissingError,
    InvalidConfigError,
    StateNotFoundError,
)

__all__ = [
    "DEFAULT_CHAIN_LIMIT",
    "DEFAULT_MAX_ITERATIONS",
    "ContextValidator",
    "Machine",
    "create_machine",
    "load_chart",
]

#: What ``context_validator=`` takes: the public context in, a write-back dict (or None) out.
ContextValidator = Callable[[dict[str, Any]], Any]

#: Microsteps one event may cause (``always`` chains, raised and done events) before it is a
#: runaway; also the events actions may queue, and the timers that may come due, at once.
DEFAULT_MAX_ITERATIONS = 1000

#: The older name of :data:`DEFAULT_MAX_ITERATIONS`.
DEFAULT_CHAIN_LIMIT = DEFAULT_MAX_ITERATIONS


class Machine:
    """An immutable, validated chart bound to its logic; build one with :func:`create_machine`.

    One machine serves any number of interpreters, in any number of threads: nothing on it
    changes after construction except a bounded cache of computed steps.
    """

    __slots__ = (
        "_by_id",
        "_frozen",
        "afters",
        "config",
        "context_factory",
        "context_validator",
        "has_always",
        "initial_context",
        "invokes",
        "logic",
        "max_iterations",
        "missing",
        "nodes",
        "root",
        "step_cache",
        "structure_hash",
        "transitions",
        "version",
    )

    def __init__(
        self,
        config: Mapping[str, Any],
        logic: MachineLogic | None,
        strict_config: bool,
        context_validator: ContextValidator | None = None,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
    ) -> None:
        frozen_config = copy.deepcopy(dict(config)) if isinstance(config, Mapping) else config
        builder = TreeBuilder(frozen_config, strict=strict_config)
        root = builder.build()
        resolve_transitions(builder.transitions, root, builder.by_custom_id)
        resolve_history_defaults(builder.nodes, root, builder.by_custom_id)
        build_handler_tables(builder.nodes)
        self.config: dict[str, Any] = frozen_config
        self.root = root
        self.nodes: tuple[StateNode, ...] = tuple(builder.nodes)
        self.transitions: tuple[Transition, ...] = tuple(builder.transitions)
        self.invokes: tuple[InvokeDef, ...] = tuple(builder.invokes)
        self.afters: tuple[AfterDef, ...] = tuple(builder.afters)
        self._by_id: dict[str, StateNode] = {n.id: n for n in builder.nodes}
        for custom, node in builder.by_custom_id.items():
            self._by_id.setdefault(f"#{custom}", node)
        self.logic = logic if logic is not None else MachineLogic()
        #: Every ``(kind, name, path)`` the logic lacks (see :meth:`require_complete`).
        self.missing: tuple[tuple[str, str, str], ...] = ()
        raw_context = frozen_config.get("context")
        #: ``context`` given as a callable: called with ``{"input": ...}`` per interpreter.
        self.context_factory: Callable[[Mapping[str, Any]], Any] | None = (
            raw_context if callable(raw_context) else None
        )
        self.initial_context: dict[str, Any] = (
            {} if callable(raw_context) else dict(raw_context or {})
        )
        self.context_validator = context_validator
        version = frozen_config.get("version")
        self.version: str | None = None if version is None else str(version)
        self.structure_hash = structure_hash(frozen_config)
        #: Microsteps one event may cause before :class:`RunawayChainError` (0.11.0's name).
        self.max_iterations = max_iterations
        self.has_always = any(node.always for node in builder.nodes)
        self.step_cache: dict[Any, Any] = {}
        _bind(self, self.logic, strict=strict_config and logic is not None)
        if context_validator is not None and self.context_factory is None:
            _check_initial_context(self, context_validator)
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"Machine is immutable; cannot set {name!r}")
        object.__setattr__(self, name, value)

    @property
    def chain_limit(self) -> int:
        """The older name of :attr:`max_iterations`."""
        return self.max_iterations

    @property
    def id(self) -> str:
        """The chart's root id (also the prefix of every state id)."""
        return self.root.id

    @property
    def initial(self) -> str | None:
        """The key of the root's initial child (None for a parallel root), as in 0.11.0."""
        return self.root.initial.key if self.root.initial is not None else None

    @property
    def states(self) -> Mapping[str, StateNode]:
        """The root's child states by key."""
        return self.root.states

    def get_state(self, state_id: str) -> StateNode:
        """The node with this full dotted id (``job.retrying``), relative id or ``#custom``.

        Raises:
            StateNotFoundError: when nothing has that id.
        """
        node = self.find_state(state_id)
        if node is None:
            raise StateNotFoundError(state_id, reference_id=self.id)
        return node

    def find_state(self, state_id: str) -> StateNode | None:
        """Like :meth:`get_state` but None when nothing matches."""
        node = self._by_id.get(state_id)
        if node is not None:
            return node
        if not state_id.startswith("#"):
            return self._by_id.get(f"{self.id}.{state_id}")
        head, _, rest = state_id.partition(".")
        base = self._by_id.get(head)
        if base is None or not rest:
            return None
        return self._by_id.get(f"{base.id}.{rest}")

    def require_complete(self) -> None:
        """Refuse a machine whose logic lacks names, listing each with its path.

        ``create_machine`` builds charts with incomplete logic (the step raises when a
        missing piece is first needed); code that must not start such a machine, a task
        definition for one, calls this right after building it.

        Raises:
            ImplementationMissingError: with ``missing`` = every ``(kind, name, path)``.
        """
        if self.missing:
            kind, name, path = self.missing[0]
            raise ImplementationMissingError(kind, name, path=path, missing=self.missing)

    def to_mermaid(self) -> str:
        """The machine as Mermaid ``stateDiagram-v2`` text (0.11.0's ``Machine.to_mermaid``)."""
        return mermaid.to_mermaid(self)

    def iter_states(self) -> Iterator[StateNode]:
        """Every state node in document order, the root first."""
        return iter(self.nodes)

    def __repr__(self) -> str:
        return f"Machine(id={self.id!r}, states={len(self.nodes)}, hash={self.structure_hash})"


def _check_initial_context(machine: Machine, validator: ContextValidator) -> None:
    """A static initial context that its model refuses is a chart error, found at build."""
    try:
        validator(public_context(copy.deepcopy(machine.initial_context)))
    except Exception as exc:
        raise InvalidConfigError(
            f"the chart's initial context does not satisfy its context model: {exc}",
            path="context",
        ) from exc


def _bind(machine: Machine, logic: MachineLogic, *, strict: bool) -> None:
    """Attach implementations to every named reference.

    A name the logic lacks is allowed (0.11.0 and XState build such charts, so a chart can
    be drawn, hashed and inspected before its code exists); the step raises
    :class:`ImplementationMissingError` when the missing piece is first needed. ``strict``
    refuses the chart here instead, listing every missing name with its path.
    """
    missing: list[tuple[str, str, str]] = []
    for action in _all_actions(machine):
        action.fn = logic.actions.get(action.type)
        if action.fn is None:
            canonical = canonical_builtin(action.type)
            if canonical is not None:
                check_params(canonical, action.params, action.path)
                action.fn = builtin_action(canonical)
        if action.fn is None:
            missing.append(("action", action.type, action.path))
    for trans in machine.transitions:
        if trans.guard is not None:
            _bind_guard(machine, trans.guard, logic, missing)
    for inv in machine.invokes:
        inv.impl = logic.services.get(inv.src)
        if inv.impl is None:
            missing.append(("service", inv.src, inv.path))
    for after in machine.afters:
        if after.delay_ms is not None:
            continue
        after.delay_fn = logic.delays.get(after.key)
        if after.delay_fn is None:
            missing.append(("delay", after.key, after.path))
    machine.missing = tuple(missing)
    if strict and missing:
        machine.require_complete()


def _bind_guard(
    machine: Machine, guard: GuardDef, logic: MachineLogic, missing: list[tuple[str, str, str]]
) -> None:
    """Bind a named guard, a ``stateIn`` guard's state, or each operand of a combinator."""
    if guard.combinator == "stateIn":
        assert guard.state_ref is not None
        guard.state = machine.find_state(guard.state_ref)
        if guard.state is None:
            raise StateNotFoundError(guard.state_ref, reference_id=machine.id, path=guard.path)
        return
    if guard.combinator is not None:
        for operand in guard.guards:
            _bind_guard(machine, operand, logic, missing)
        return
    guard.fn = logic.guards.get(guard.type)
    if guard.fn is None:
        missing.append(("guard", guard.type, guard.path))
        return
    guard.takes_params = guard.params is not None and accepts_params(guard.fn)


def _all_actions(machine: Machine) -> Iterator[ActionDef]:
    for node in machine.nodes:
        yield from node.entry
        yield from node.exit
    for trans in machine.transitions:
        yield from trans.actions


def create_machine(
    config: Mapping[str, Any] | str | Path,
    logic: MachineLogic | None = None,
    strict_config: bool = False,
    *,
    context_validator: ContextValidator | None = None,
    context_model: Any = None,
    max_iterations: int | None = None,
    chain_limit: int | None = None,
) -> Machine:
    """Validate a chart and bind it to its logic.

    Args:
        config: The chart as a dict, or a path to a JSON file, or ``"pkg:name.json"`` for a
            chart shipped in ``xsm_celery.charts``.
        logic: The named implementations. A name it lacks raises
            :class:`ImplementationMissingError` when the step first needs it.
        strict_config: Refuse unknown keys, and with ``logic`` given refuse a chart whose
            logic lacks any name (the error lists every missing one with its path).
        context_validator: ``fn(public_context) -> dict | None`` run after every step on
            the user's context keys (``_xsm_`` keys filtered out); it raises to refuse, and
            a returned dict is written back (coerced values, defaults).
        context_model: A pydantic model class, shorthand for
            ``context_validator=xsm_celery.engine.context_model.context_model(model)`` (needs
            the ``pydantic`` extra).
        max_iterations: Microsteps one event may cause (``always`` chains, raised and
            done events) before :class:`RunawayChainError`; also bounds the events actions
            queue and the timers due at once. Default: the chart's root ``maxIterations``
            key, else :data:`DEFAULT_MAX_ITERATIONS` (0.11.0 reads the same key).
        chain_limit: The older name of ``max_iterations``.

    Raises:
        InvalidConfigError: the chart is not a valid statechart (``path`` names the node).
        StateNotFoundError: a transition target names no state.
        ImplementationMissingError: with ``strict_config``, ``logic`` lacks names the chart
            uses.
    """
    if isinstance(config, (str, Path)):
        config = load_chart(config)
    if logic is not None and not isinstance(logic, MachineLogic):
        raise ArgumentTypeError(f"logic must be a MachineLogic, got {type(logic).__name__}")
    if context_model is not None:
        if context_validator is not None:
            raise ConfigurationError("pass context_model= or context_validator=, not both")
        context_validator = model_validator(context_model)
    if isinstance(config, Mapping):
        check_context_depth(str(config.get("id", "")), config.get("context"))
    bound = _max_iterations(config, max_iterations, chain_limit)
    return Machine(config, logic, strict_config, context_validator, bound)


def _max_iterations(
    config: Mapping[str, Any], max_iterations: int | None, chain_limit: int | None
) -> int:
    """The runaway bound: the argument, its older name, the chart's key, or the default.

    Raises:
        ConfigurationError: both names given, or the bound is not a positive int.
    """
    if max_iterations is not None and chain_limit is not None:
        raise ConfigurationError("pass max_iterations= or chain_limit= (its older name), not both")
    name, value = "max_iterations", max_iterations
    if value is None and chain_limit is not None:
        name, value = "chain_limit", chain_limit
    if value is None and isinstance(config, Mapping) and "maxIterations" in config:
        name, value = "the chart's 'maxIterations'", config["maxIterations"]
    if value is None:
        return DEFAULT_MAX_ITERATIONS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive int, got {value!r}")
    return value


def load_chart(source: str | Path) -> dict[str, Any]:
    """Read a chart from a JSON file, or from ``xsm_celery.charts`` with a ``pkg:`` prefix.

    Raises:
        InvalidConfigError: the file is not JSON or not a JSON object.
    """
    text_source = str(source)
    try:
        if text_source.startswith("pkg:"):
            name = text_source[4:]
            text = resources.files("xsm_celery.charts").joinpath(name).read_text("utf-8")
        else:
            text = Path(source).read_text("utf-8")
    except (OSError, ModuleNotFoundError) as exc:
        raise InvalidConfigError(f"cannot read chart {text_source!r}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(f"chart {text_source!r} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidConfigError(f"chart {text_source!r} must hold a JSON object")
    return data
