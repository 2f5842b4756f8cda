"""Resolve transition targets and precompute what each transition exits and enters.

A target may be a sibling key (``"done"``), a dotted path below a sibling (``"b.c"``), a
child of the source (``".child"``), a custom id (``"#retry"`` or ``"#retry.waiting"``) or a
full dotted id from the root (``"job.retrying"``). The set of states a transition enters
depends only on its targets, so it is computed here once, except when a target is a history
state: what that enters depends on what its parent last had active, so
:func:`history_entry` finds it per step. The exit set is the active part of the
transition's domain and is found per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from xsm_celery.engine.chart import StateNode, Transition
from xsm_celery.engine.events import is_descriptor, matches_descriptor
from xsm_celery.errors import InvalidConfigError, StateNotFoundError

__all__ = [
    "build_handler_tables",
    "candidates_for",
    "compute_domain",
    "default_entry",
    "entry_set",
    "entry_states",
    "history_entry",
    "resolve_history_defaults",
    "resolve_target",
    "resolve_transitions",
    "state_by_path",
]


def state_by_path(start: StateNode, parts: Sequence[str]) -> StateNode | None:
    """Walk child keys from ``start``; None when a key is missing."""
    node = start
    for part in parts:
        child = node.states.get(part)
        if child is None:
            return None
        node = child
    return node


def resolve_target(
    ref: str, source: StateNode, root: StateNode, by_custom_id: Mapping[str, StateNode]
) -> StateNode | None:
    """Find the state a target reference names, or None."""
    if ref.startswith("#"):
        head, _, rest = ref[1:].partition(".")
        base = by_custom_id.get(head)
        if base is None and head == root.id:
            base = root
        if base is None:
            return None
        return state_by_path(base, rest.split(".")) if rest else base
    if ref.startswith("."):
        return state_by_path(source, ref[1:].split("."))
    parts = ref.split(".")
    if source.parent is not None:
        found = state_by_path(source.parent, parts)
        if found is not None:
            return found
    if ref == root.id:
        return root
    if ref.startswith(f"{root.id}."):
        return state_by_path(root, ref[len(root.id) + 1 :].split("."))
    if source.parent is None:
        return state_by_path(root, parts)
    return None


def default_entry(node: StateNode, into: set[StateNode]) -> None:
    """Add ``node`` and the states its default entry enters (initial children, all regions)."""
    into.add(node)
    if node.type == "compound" and node.initial is not None:
        default_entry(node.initial, into)
    elif node.type == "parallel":
        for child in node.children:
            default_entry(child, into)


def compute_domain(trans: Transition) -> StateNode | None:
    """The state whose active descendants the transition exits; None if it changes no state.

    A transition whose targets all lie inside its source, and that does not ask to
    ``reenter``, keeps the source active; a parallel source narrows to the one region that
    holds every target. A target equal to the source without ``reenter`` changes nothing, as
    in 0.11.0. Anything else exits up to the nearest ancestor of the source that contains
    every target.
    """
    source, targets = trans.source, trans.targets
    if not targets:
        return None
    inside = all(t is source or source in t.ancestor_set for t in targets)
    if inside and not trans.reenter:
        if all(t is source for t in targets):
            return None
        domain = source
        while domain.type == "parallel":
            region = _common_child(domain, targets)
            if region is None:
                break
            domain = region
        return domain
    for ancestor in source.ancestors:
        if all(ancestor in t.ancestor_set for t in targets):
            return ancestor
    return source.ancestors[-1] if source.ancestors else source


def _common_child(parent: StateNode, targets: Iterable[StateNode]) -> StateNode | None:
    """The child of ``parent`` that contains every target (as a proper descendant), if one."""
    found: StateNode | None = None
    for target in targets:
        child = next((c for c in parent.children if c in target.ancestor_set), None)
        if child is None or (found is not None and child is not found):
            return None
        found = child
    return found


def entry_set(trans: Transition) -> tuple[StateNode, ...]:
    """Every state the transition enters, in document order (entry order)."""
    return entry_states(trans.targets, trans.domain)


def entry_states(targets: Sequence[StateNode], domain: StateNode | None) -> tuple[StateNode, ...]:
    """The states entered when ``targets`` are entered from inside ``domain``, in entry order."""
    if domain is None:
        return ()
    into: set[StateNode] = set()
    for target in targets:
        default_entry(target, into)
    for target in targets:
        for ancestor in target.ancestors:
            if ancestor is domain:
                break
            into.add(ancestor)
            if ancestor.type == "parallel":
                _enter_missing_regions(ancestor, into)
    if domain.type == "parallel":
        _enter_missing_regions(domain, into)
    return tuple(sorted(into, key=lambda s: s.order))


def history_entry(
    trans: Transition, remembered: Mapping[StateNode, tuple[StateNode, ...]]
) -> tuple[StateNode, ...]:
    """The entry set of a transition that targets history states, given what they remember.

    A history state stands for what its parent last had active: the active children
    (shallow, each entered by default) or every active leaf (deep). Never visited, it stands
    for its default ``target``, or without one for its parent's default entry, as in XState
    v5 and SCXML.
    """
    concrete: list[StateNode] = []
    for target in trans.targets:
        if target.type != "history":
            concrete.append(target)
            continue
        recorded = remembered.get(target)
        if recorded:
            concrete.extend(recorded)
        elif target.history_default:
            concrete.extend(target.history_default)
        else:
            assert target.parent is not None
            concrete.append(target.parent)
    return entry_states(concrete, trans.domain)


def resolve_history_defaults(
    nodes: Iterable[StateNode], root: StateNode, by_custom_id: Mapping[str, StateNode]
) -> None:
    """Resolve each history state's default targets, which must lie inside its parent.

    Raises:
        StateNotFoundError: a default target names no state.
        InvalidConfigError: it names a state outside the parent, or another history state.
    """
    for node in nodes:
        if node.type != "history":
            continue
        parent = node.parent
        assert parent is not None
        found = []
        for ref in node.history_target_ids:
            target = resolve_target(ref, node, root, by_custom_id)
            if target is None:
                raise StateNotFoundError(ref, reference_id=node.id, path=f"{node.path}.target")
            if parent not in target.ancestor_set or target.type == "history":
                raise InvalidConfigError(
                    f"history state {node.id!r} defaults to {target.id!r}; a default target "
                    f"must be a state inside {parent.id!r} (not a history state)",
                    path=f"{node.path}.target",
                )
            found.append(target)
        node.history_default = tuple(found)


def _enter_missing_regions(parallel: StateNode, into: set[StateNode]) -> None:
    """Default-enter each region of ``parallel`` that nothing in ``into`` lies in."""
    for region in parallel.children:
        if not any(region is s or region in s.ancestor_set for s in into):
            default_entry(region, into)


def resolve_transitions(
    transitions: Iterable[Transition],
    root: StateNode,
    by_custom_id: Mapping[str, StateNode],
) -> None:
    """Resolve every transition's targets, then its domain and entry set.

    Raises:
        StateNotFoundError: naming the transition's path when a target does not resolve.
    """
    for trans in transitions:
        nodes = []
        for ref in trans.target_ids:
            node = resolve_target(ref, trans.source, root, by_custom_id)
            if node is None:
                raise StateNotFoundError(ref, reference_id=trans.source.id, path=trans.path)
            nodes.append(node)
        trans.targets = tuple(nodes)
        trans.domain = compute_domain(trans)
        trans.history = any(node.type == "history" for node in nodes)
        trans.entry = () if trans.history else entry_set(trans)


def build_handler_tables(nodes: Iterable[StateNode]) -> None:
    """Give each leaf its candidates per event, its own first, then each ancestor's.

    Selecting a transition for an event in a leaf is then one dict look-up plus guard checks,
    which is what keeps ``send()`` cheap. A leaf under a wildcard descriptor (``*``,
    ``order.*``) fills its table per event type on first use instead (see
    :func:`candidates_for`), since which descriptors match depends on the event.
    """
    for node in nodes:
        own: dict[str, list[Transition]] = {}
        for event, candidates in node.on.items():
            own.setdefault(event, []).extend(candidates)
        for after in node.after:
            own.setdefault(after.event_type, []).extend(after.transitions)
        for inv in node.invoke:
            own.setdefault(inv.done_type, []).extend(inv.on_done)
            own.setdefault(inv.error_type, []).extend(inv.on_error)
        node.own_handlers = {event: tuple(cands) for event, cands in own.items()}
    for node in nodes:
        if not node.is_leaf:
            continue
        chain = (node, *node.ancestors)
        node.eventless = tuple(t for state in chain for t in state.always)
        node.has_wildcards = any(is_descriptor(key) for state in chain for key in state.on)
        if node.has_wildcards:
            node.handlers = {}
            continue
        handlers: dict[str, list[Transition]] = {}
        for state in chain:
            for event, candidates in state.own_handlers.items():
                handlers.setdefault(event, []).extend(candidates)
        node.handlers = {event: tuple(cands) for event, cands in handlers.items()}


#: Event types a wildcard leaf remembers candidates for; past it they are found each time.
WILDCARD_CACHE_LIMIT = 1024


def candidates_for(leaf: StateNode, event_type: str) -> tuple[Transition, ...]:
    """The candidates of a wildcard leaf for one event type, as XState v5 orders them.

    From the leaf up, each state offers its exact transitions for the event if it has any,
    otherwise those of its matching descriptors, the longest descriptor first. Engine events
    match no descriptor.
    """
    found: list[Transition] = []
    for state in (leaf, *leaf.ancestors):
        exact = state.own_handlers.get(event_type)
        if exact:
            found.extend(exact)
            continue
        matching = [k for k in state.on if is_descriptor(k) and matches_descriptor(k, event_type)]
        for key in sorted(matching, key=len, reverse=True):
            found.extend(state.on[key])
    result = tuple(found)
    if len(leaf.handlers) < WILDCARD_CACHE_LIMIT:
        leaf.handlers[event_type] = result
    return result
