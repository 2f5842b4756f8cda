"""Graph tools: the configurations a chart can reach and the shortest paths to each.

The graph is found by running the chart, not by reading it, so every rule of the engine
(eventless chains, done events, parallel regions, history) shapes it exactly as it shapes a
real run. Exploration runs a stand-in copy of the machine: custom actions do nothing, an
invocation waits until a step delivers its result (``done.invoke.<id>`` or
``error.platform.<id>``), a named delay the logic lacks stands at
:data:`STAND_IN_DELAY_MS`, and each guard answers as ``guards=`` says. With the default,
``"both"``, each step is tried under every combination of guard answers that changes what it
evaluates (a decision tree over the guards in the order the step asks them), so a path
records the answers it needs and :func:`~xsm_celery.engine.graph_model.forceable` replays
it. A guard answers once per step: asked again in the same step, it gives the same answer.

A node of the graph is a configuration (the set of active leaf ids). Reaching one twice with
a different context or history is one node: the tools explore what a chart can do, not
every value its context can hold.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from xsm_celery.engine.builtins import canonical_builtin
from xsm_celery.engine.chart import StateNode, Transition
from xsm_celery.engine.clock import SimulatedClock
from xsm_celery.engine.events import Event, done_state_type, is_engine_event_type
from xsm_celery.engine.graph_model import (
    Path,
    Step,
    apply_step,
    guard_names,
    refused_guards,
)
from xsm_celery.engine.invoke import from_callback
from xsm_celery.engine.logic import MachineLogic
from xsm_celery.engine.machine import Machine, create_machine
from xsm_celery.engine.plugins import PluginBase
from xsm_celery.engine.sync import SyncInterpreter
from xsm_celery.errors import (
    ArgumentTypeError,
    ConfigurationError,
    ExplorationLimitError,
    RunawayChainError,
)

__all__ = [
    "DEFAULT_MAX_CONFIGS",
    "DEFAULT_MAX_DEPTH",
    "GUARD_MODES",
    "STAND_IN_DELAY_MS",
    "GuardPredicate",
    "reachable_states",
    "shortest_paths",
    "simple_paths",
    "transition_coverage_targets",
    "transition_paths",
]

#: ``predicate(guard_name, context, event) -> bool``: how a guard answers when one is given.
GuardPredicate = Callable[[str, Mapping[str, Any], Event], bool]
#: Every guard True, every guard False, or each combination that matters (the default).
GUARD_MODES = ("true", "false", "both")
#: ``steps`` counts steps (breadth first); ``time`` adds up clock advances (events cost 0).
WEIGHTS = ("steps", "time")
#: Steps in a path at most.
DEFAULT_MAX_DEPTH = 50
#: Configurations at most before :class:`ExplorationLimitError`; parallel regions multiply.
DEFAULT_MAX_CONFIGS = 100_000
#: The delay a named delay the logic does not give stands at while exploring.
STAND_IN_DELAY_MS = 1000.0

Coverage = tuple[str, str, str]


class _Oracle:
    """Answers the stand-in machine's guards for one step and remembers what it was asked."""

    def __init__(self, guards: str | GuardPredicate) -> None:
        self.mode = guards if isinstance(guards, str) else "predicate"
        self.predicate = None if isinstance(guards, str) else guards
        self.forced: dict[str, bool] = {}
        self.replaying: frozenset[str] | None = None
        self.answers: dict[str, bool] = {}
        self.asked: list[str] = []

    def begin(self, forced: Mapping[str, bool], replaying: frozenset[str] | None) -> None:
        self.forced = dict(forced)
        self.replaying = replaying
        self.answers = {}
        self.asked = []

    def guard(self, name: str) -> Callable[..., bool]:
        def answer(ctx: Any, event: Any, *params: Any) -> bool:
            return self.answer(name, ctx, event)

        return answer

    def answer(self, name: str, ctx: Any, event: Any) -> bool:
        if name in self.answers:
            return self.answers[name]
        if self.replaying is not None:
            value = name not in self.replaying
        elif self.predicate is not None:
            value = bool(self.predicate(name, ctx, event))
        elif self.mode == "both":
            value = self.forced.get(name, True)
        else:
            value = self.mode == "true"
        self.answers[name] = value
        self.asked.append(name)
        return value

    def assumptions(self) -> tuple[str, ...]:
        return tuple(f"guard:{name}=False" for name in self.asked if not self.answers[name])

    def branches(self) -> list[dict[str, bool]]:
        """The untried answer sets: each guard first defaulted True here, turned False."""
        if self.mode != "both":
            return []
        pinned = dict(self.forced)
        found = []
        for name in self.asked:
            if name in self.forced:
                continue
            found.append({**pinned, name: False})
            pinned[name] = True
        return found


class _Taken(PluginBase):
    """Collects the transitions a step takes."""

    def __init__(self) -> None:
        self.taken: list[Transition] = []

    def on_transition(self, i: Any, from_states: Any, to_states: Any, transition: Any) -> None:
        self.taken.append(transition)


def _no_op(interp: Any, ctx: Any, event: Any, action: Any) -> None:
    return None


def _waits(send_back: Any, receive: Any, ctx: Any, event: Any) -> None:
    return None


class _Explorer:
    """Runs the stand-in machine: the moves open in a configuration and where each leads."""

    def __init__(self, machine: Machine, guards: str | GuardPredicate) -> None:
        if not callable(guards) and guards not in GUARD_MODES:
            raise ConfigurationError(
                f"guards must be one of {GUARD_MODES} or predicate(name, context, event), "
                f"got {guards!r}"
            )
        self.oracle = _Oracle(guards)
        self.known_delays = set(machine.logic.delays)
        self.machine = _stand_in(machine, self.oracle)
        self.taken = _Taken()

    def at(self, path: Path) -> tuple[SyncInterpreter, SimulatedClock]:
        clock = SimulatedClock(wall_start=0.0)
        interp = SyncInterpreter(self.machine, clock)
        interp.use(self.taken)
        self.oracle.begin({}, frozenset())
        interp.start()
        for step in path.steps:
            self.oracle.begin({}, refused_guards(step.assumptions))
            apply_step(interp, clock, step.event)
        return interp, clock

    def start(self) -> tuple[Path, list[Transition]]:
        self.taken.taken.clear()
        interp, _ = self.at(Path((), frozenset()))
        key = frozenset(interp.current_state_ids)
        return Path((), key), list(self.taken.taken)

    def moves(self, path: Path) -> list[str | None]:
        """The steps open at the end of ``path``: events in document order, then time."""
        interp, _ = self.at(path)
        if interp.status != "running":
            return []
        moves: list[str | None] = []
        for node in sorted(interp.configuration, key=lambda n: n.order):
            for event in node.on:
                if event not in moves and _sendable(event):
                    moves.append(event)
            for inv in node.invoke:
                if inv.on_done:
                    moves.append(inv.done_type)
                if inv.on_error:
                    moves.append(inv.error_type)
        if interp.pending_timers():
            moves.append(None)
        return moves

    def outcomes(self, path: Path, move: str | None) -> Iterator[tuple[Step, list[Transition]]]:
        """Where ``move`` leads from the end of ``path``, once per distinct guard answer set."""
        pending: list[dict[str, bool]] = [{}]
        while pending:
            forced = pending.pop(0)
            interp, clock = self.at(path)
            before = frozenset(interp.current_state_ids)
            delay, extra = self._timer_of(interp) if move is None else (None, ())
            self.taken.taken.clear()
            self.oracle.begin(forced, None)
            try:
                apply_step(interp, clock, move)
            except RunawayChainError:
                # A guard forced the same way on every lap loops for ever; real guards
                # read a context the loop changes, so this branch is an artefact.
                pending.extend(self.oracle.branches())
                continue
            pending.extend(self.oracle.branches())
            after = frozenset(interp.current_state_ids)
            assumptions = self.oracle.assumptions() + extra
            yield Step(move, delay, before, after, assumptions), list(self.taken.taken)

    def _timer_of(self, interp: SyncInterpreter) -> tuple[float | None, tuple[str, ...]]:
        timer = interp.pending_timers()[0]
        name = timer.after.delay_name if timer.after is not None else None
        if name is not None and name not in self.known_delays:
            return None, (f"delay:{name}=unknown",)
        return float(timer.delay_ms), ()


def _sendable(event: str) -> bool:
    return not is_engine_event_type(event) and "*" not in event


def _stand_in(machine: Machine, oracle: _Oracle) -> Machine:
    actions = {action.type for node in machine.nodes for action in (*node.entry, *node.exit)} | {
        action.type for trans in machine.transitions for action in trans.actions
    }
    delays: dict[str, Any] = {a.key: STAND_IN_DELAY_MS for a in machine.afters if a.delay_name}
    delays.update(machine.logic.delays)
    logic = MachineLogic(
        actions={name: _no_op for name in actions if canonical_builtin(name) is None},
        guards={name: oracle.guard(name) for name in guard_names(machine)},
        services={inv.src: from_callback(_waits) for inv in machine.invokes},
        delays=delays,
    )
    return create_machine(machine.config, logic=logic, max_iterations=machine.max_iterations)


def _check_bounds(max_depth: int, max_configs: int | None = 1) -> None:
    for name, value in (("max_depth", max_depth), ("max_configs", max_configs)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(f"{name} must be an int, got {value!r}")
        if value < 0:
            raise ConfigurationError(f"{name} must be >= 0, got {value!r}")


def _cost(path: Path, weight: str) -> float:
    return path.total_delay_ms if weight == "time" else float(len(path.steps))


EdgeHook = Callable[[Path, Step, list[Transition]], None]


def _search(
    explorer: _Explorer,
    *,
    max_depth: int,
    max_configs: int | None,
    weight: str,
    on_edge: EdgeHook | None = None,
) -> dict[frozenset[str], Path]:
    """Dijkstra from the initial configuration; ties go to the move found first."""
    start, _ = explorer.start()
    best = {start.final_states: start}
    heap: list[tuple[float, int, frozenset[str]]] = [(0.0, 0, start.final_states)]
    expanded: set[frozenset[str]] = set()
    order = 1
    while heap:
        _, _, key = heapq.heappop(heap)
        if key in expanded:
            continue
        expanded.add(key)
        path = best[key]
        if len(path.steps) >= max_depth:
            continue
        for move in explorer.moves(path):
            for step, taken in explorer.outcomes(path, move):
                longer = Path((*path.steps, step), step.to_states)
                if on_edge is not None:
                    on_edge(path, step, taken)
                known = best.get(step.to_states)
                if known is not None and _cost(known, weight) <= _cost(longer, weight):
                    continue
                if known is None and max_configs is not None and len(best) >= max_configs:
                    raise ExplorationLimitError(max_configs)
                best[step.to_states] = longer
                heapq.heappush(heap, (_cost(longer, weight), order, step.to_states))
                order += 1
    return best


def shortest_paths(
    machine: Machine,
    *,
    guards: str | GuardPredicate = "both",
    max_depth: int = DEFAULT_MAX_DEPTH,
    weight: str = "steps",
    max_configs: int | None = DEFAULT_MAX_CONFIGS,
) -> dict[frozenset[str], Path]:
    """The shortest path to every reachable configuration (the initial one maps to no steps).

    Args:
        machine: The machine to explore; it is not changed and nothing of its logic runs
            but its delays (the module doc says what stands in for the rest).
        guards: ``"both"`` (each guard either way, recorded in the steps' ``assumptions``),
            ``"true"``, ``"false"``, or ``predicate(name, context, event) -> bool``.
        max_depth: Steps in a path at most.
        weight: ``"steps"`` (fewest steps) or ``"time"`` (least clock advance).
        max_configs: Configurations at most (None: no bound).

    Raises:
        ConfigurationError: an unknown ``guards`` or ``weight``, or a negative bound.
        ExplorationLimitError: more than ``max_configs`` configurations.
    """
    if weight not in WEIGHTS:
        raise ConfigurationError(f"weight must be one of {WEIGHTS}, got {weight!r}")
    _check_bounds(max_depth, max_configs)
    explorer = _Explorer(machine, guards)
    return _search(explorer, max_depth=max_depth, max_configs=max_configs, weight=weight)


def reachable_states(
    machine: Machine,
    *,
    guards: str | GuardPredicate = "both",
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_configs: int = DEFAULT_MAX_CONFIGS,
) -> set[str]:
    """Every state id the machine can reach, leaves and their ancestors (the root included).

    Arguments and errors as for :func:`shortest_paths`.
    """
    found: set[str] = set()
    paths = shortest_paths(machine, guards=guards, max_depth=max_depth, max_configs=max_configs)
    for configuration in paths:
        for state_id in configuration:
            node: StateNode | None = machine.get_state(state_id)
            while node is not None:
                found.add(node.id)
                node = node.parent
    return found


def simple_paths(
    machine: Machine,
    *,
    guards: str | GuardPredicate = "both",
    max_paths: int = 1000,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> list[Path]:
    """Every non-empty path that never revisits a configuration, depth first.

    Stops after ``max_paths`` paths; no path is longer than ``max_depth`` steps. Two guard
    answer sets that lead one move to the same configuration give one path.
    """
    _check_bounds(max_depth, max_paths)
    explorer = _Explorer(machine, guards)
    start, _ = explorer.start()
    found: list[Path] = []
    stack = [(start, frozenset({start.final_states}))]
    while stack:
        path, seen = stack.pop()
        if path.steps:
            found.append(path)
            if len(found) >= max_paths:
                break
        if len(path.steps) >= max_depth:
            continue
        children: list[Path] = []
        for move in explorer.moves(path):
            for step, _ in explorer.outcomes(path, move):
                if step.to_states in seen or any(
                    c.steps[-1].event == move and c.final_states == step.to_states for c in children
                ):
                    continue
                children.append(Path((*path.steps, step), step.to_states))
        stack.extend((c, seen | {c.final_states}) for c in reversed(children))
    return found


def transition_coverage_targets(machine: Machine) -> set[Coverage]:
    """``(source_id, label, target_id)`` for every transition of the chart, read statically.

    Labels: ``on 'PAY'``, ``always``, ``after 1000`` (or the delay's name), ``onDone`` (a
    compound or parallel state's), ``invoke 'charge' onDone`` / ``onError``. A targetless
    transition points back at its source; one with several targets gives one entry each.
    """
    return {target for targets in coverage_labels(machine).values() for target in targets}


def transition_paths(
    machine: Machine,
    *,
    guards: str | GuardPredicate = "both",
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_configs: int | None = DEFAULT_MAX_CONFIGS,
) -> dict[Coverage, Path]:
    """A shortest path whose last step takes each coverable transition, by coverage target.

    A transition the start takes (an initial ``always``) maps to the empty path; one no path
    within ``max_depth`` takes is missing (compare with :func:`transition_coverage_targets`).
    """
    _check_bounds(max_depth, max_configs)
    explorer = _Explorer(machine, guards)
    labels = coverage_labels(explorer.machine)
    found: dict[Coverage, Path] = {}

    def record(path: Path, step: Step, taken: list[Transition]) -> None:
        for transition in taken:
            for target in labels.get(transition, ()):
                found.setdefault(target, Path((*path.steps, step), step.to_states))

    start, initial = explorer.start()
    for transition in initial:
        for target in labels.get(transition, ()):
            found.setdefault(target, start)
    _search(explorer, max_depth=max_depth, max_configs=max_configs, weight="steps", on_edge=record)
    return dict(sorted(found.items()))


def coverage_labels(machine: Machine) -> dict[Transition, list[Coverage]]:
    """The coverage targets of each transition of ``machine``."""
    labels: dict[Transition, list[Coverage]] = {}

    def add(node: StateNode, label: str, transitions: tuple[Transition, ...]) -> None:
        for transition in transitions:
            targets = [t.id for t in transition.targets] or [node.id]
            labels[transition] = [(node.id, label, target) for target in targets]

    for node in machine.nodes:
        for event, transitions in node.on.items():
            add(
                node,
                "onDone" if event == done_state_type(node.id) else f"on '{event}'",
                transitions,
            )
        add(node, "always", node.always)
        for after in node.after:
            add(node, f"after {after.key}", after.transitions)
        for inv in node.invoke:
            add(node, f"invoke '{inv.src}' onDone", inv.on_done)
            add(node, f"invoke '{inv.src}' onError", inv.on_error)
    return labels
