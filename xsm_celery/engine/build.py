"""Turn a chart dict into the state-node tree, refusing what is not a valid statechart.

Every refusal is an :class:`InvalidConfigError` whose ``path`` names the bad node in the
chart's own keys (``states.retrying.after``), so the message can be acted on without reading
the whole chart. Targets are resolved in :mod:`xsm_celery.engine.targets` once the tree exists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from xsm_celery.engine.builtins import canonical_builtin
from xsm_celery.engine.chart import (
    HISTORY_KINDS,
    STATE_TYPES,
    ActionDef,
    AfterDef,
    GuardDef,
    InvokeDef,
    StateNode,
    Transition,
)
from xsm_celery.engine.events import after_event_type, done_state_type, is_descriptor
from xsm_celery.errors import InvalidConfigError

__all__ = ["TreeBuilder"]

ROOT_KEYS = frozenset({"context", "version", "predictableActionArguments", "maxIterations"})
STATE_KEYS = frozenset(
    {
        "id",
        "type",
        "initial",
        "states",
        "on",
        "always",
        "after",
        "entry",
        "exit",
        "invoke",
        "tags",
        "meta",
        "description",
        "output",
        "onDone",
    }
)
HISTORY_KEYS = frozenset({"id", "type", "history", "target", "meta", "description"})
TRANSITION_KEYS = frozenset(
    {"target", "actions", "guard", "cond", "in", "reenter", "internal", "description", "meta"}
)
INVOKE_KEYS = frozenset({"src", "id", "onDone", "onError", "input", "meta", "description"})


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class TreeBuilder:
    """Walk a chart once, creating nodes and raw transitions in document order.

    ``strict`` refuses unknown keys (0.11.0's ``strict_config``); otherwise they are ignored,
    as XState ignores them. Keys starting with ``x-`` are always allowed for tooling.
    """

    def __init__(self, config: Mapping[str, Any], *, strict: bool) -> None:
        self.strict = strict
        self.nodes: list[StateNode] = []
        self.by_custom_id: dict[str, StateNode] = {}
        self.transitions: list[Transition] = []
        self.invokes: list[InvokeDef] = []
        self.afters: list[AfterDef] = []
        self.config = config

    def build(self) -> StateNode:
        """Build and return the root node; ``nodes`` then lists every node in document order."""
        config = self.config
        if not isinstance(config, Mapping):
            raise InvalidConfigError(f"a chart must be a dict, got {type(config).__name__}")
        machine_id = config.get("id")
        if not isinstance(machine_id, str) or not machine_id:
            raise InvalidConfigError(
                f"the chart needs an 'id' (a non-empty str), got {machine_id!r}",
                path="id",
            )
        if "states" not in config:
            raise InvalidConfigError("the root needs 'states'; a machine has states", path="")
        context = config.get("context")
        if context is not None and not isinstance(context, Mapping) and not callable(context):
            raise InvalidConfigError(
                f"'context' must be a dict or a callable of {{'input': ...}}, got "
                f"{type(context).__name__}",
                path="context",
            )
        root = self._node(machine_id, machine_id, None, "", config)
        return root

    def _check_keys(self, raw: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
        if not self.strict:
            return
        for key in raw:
            if key not in allowed and not (isinstance(key, str) and key.startswith("x-")):
                raise InvalidConfigError(
                    f"unknown key {key!r}; fix the spelling, or use 'meta' or an 'x-' prefix "
                    "for your own data",
                    path=_join(path, str(key)),
                )

    def _node(
        self, key: str, state_id: str, parent: StateNode | None, path: str, raw: Any
    ) -> StateNode:
        if not isinstance(raw, Mapping):
            raise InvalidConfigError(
                f"a state must be a dict, got {type(raw).__name__}", path=path or "states"
            )
        if raw.get("type") == "history":
            return self._history_node(key, state_id, parent, path, raw)
        self._check_keys(raw, STATE_KEYS | (ROOT_KEYS if parent is None else frozenset()), path)
        node = StateNode(key, state_id, parent, path)
        node.config = raw
        node.order = len(self.nodes)
        self.nodes.append(node)
        if parent is not None:
            node.ancestors = (parent, *parent.ancestors)
            node.ancestor_set = frozenset(node.ancestors)
        self._custom_id(node, raw)
        children = self._children(node, raw)
        node.type = self._state_type(node, raw, bool(children))
        self._initial(node, raw)
        self._details(node, raw)
        return node

    def _history_node(
        self, key: str, state_id: str, parent: StateNode | None, path: str, raw: Mapping[str, Any]
    ) -> StateNode:
        """A history state: remembers its parent's active children (or leaves, ``deep``)."""
        if parent is None:
            raise InvalidConfigError("the root cannot be a history state", path="type")
        self._check_keys(raw, HISTORY_KEYS, path)
        for forbidden in ("states", "on", "always", "after", "entry", "exit", "invoke"):
            if forbidden in raw:
                raise InvalidConfigError(
                    f"a history state is a pointer into its parent and takes no '{forbidden}'; "
                    "give it only 'history' and an optional default 'target'",
                    path=_join(path, forbidden),
                )
        node = StateNode(key, state_id, parent, path)
        node.config = raw
        node.type = "history"
        node.order = len(self.nodes)
        self.nodes.append(node)
        node.ancestors = (parent, *parent.ancestors)
        node.ancestor_set = frozenset(node.ancestors)
        self._custom_id(node, raw)
        kind = raw.get("history", "shallow")
        if kind not in HISTORY_KINDS:
            raise InvalidConfigError(
                f"'history' must be 'shallow' or 'deep', got {kind!r}",
                path=_join(path, "history"),
            )
        node.history = kind
        target = raw.get("target")
        if target is not None:
            if isinstance(target, Mapping):
                target = target.get("target")
            if isinstance(target, str) and target:
                node.history_target_ids = (target,)
            elif isinstance(target, list) and target and all(isinstance(t, str) for t in target):
                node.history_target_ids = tuple(target)
            else:
                raise InvalidConfigError(
                    f"a history state's 'target' must be a state reference, got {target!r}",
                    path=_join(path, "target"),
                )
        description = raw.get("description")
        node.description = description if isinstance(description, str) else None
        meta = raw.get("meta", {})
        node.meta = meta if isinstance(meta, Mapping) else {}
        return node

    def _custom_id(self, node: StateNode, raw: Mapping[str, Any]) -> None:
        if node.parent is None or "id" not in raw:
            return
        custom = raw["id"]
        if not isinstance(custom, str) or not custom or "." in custom:
            raise InvalidConfigError(
                f"a state 'id' must be a non-empty str without dots, got {custom!r}",
                path=_join(node.path, "id"),
            )
        other = self.by_custom_id.get(custom)
        if other is not None:
            raise InvalidConfigError(
                f"duplicate state id {custom!r}, already used by {other.path or 'the root'}; "
                "custom ids must be unique in a machine",
                path=_join(node.path, "id"),
            )
        self.by_custom_id[custom] = node
        node.custom_id = custom

    def _children(self, node: StateNode, raw: Mapping[str, Any]) -> tuple[StateNode, ...]:
        states = raw.get("states")
        if states is None:
            return ()
        spath = _join(node.path, "states")
        if not isinstance(states, Mapping):
            raise InvalidConfigError(
                f"'states' must map state names to dicts, got {type(states).__name__}",
                path=spath,
            )
        children = []
        for key, child_raw in states.items():
            if not isinstance(key, str) or not key or "." in key or key.startswith("#"):
                raise InvalidConfigError(
                    f"state name {key!r} must be a non-empty str without '.' or leading '#'",
                    path=_join(spath, str(key)),
                )
            child = self._node(key, f"{node.id}.{key}", node, _join(spath, key), child_raw)
            children.append(child)
        node.children = tuple(c for c in children if c.type != "history")
        node.history_children = tuple(c for c in children if c.type == "history")
        node.states = {c.key: c for c in children}
        if node.history_children and not node.children:
            raise InvalidConfigError(
                "a state whose only children are history states has nothing to remember",
                path=spath,
            )
        return node.children

    def _state_type(self, node: StateNode, raw: Mapping[str, Any], has_children: bool) -> str:
        declared = raw.get("type")
        tpath = _join(node.path, "type")
        if declared is None:
            return "compound" if has_children else "atomic"
        if declared not in STATE_TYPES:
            raise InvalidConfigError(
                f"unknown state type {declared!r}; use one of {', '.join(STATE_TYPES)}",
                path=tpath,
            )
        if declared == "parallel" and not has_children:
            raise InvalidConfigError("a parallel state needs 'states' (its regions)", path=tpath)
        if declared in ("atomic", "final") and has_children:
            raise InvalidConfigError(
                f"a {declared} state cannot have 'states'; drop the type or the children",
                path=tpath,
            )
        if declared == "compound" and not has_children:
            raise InvalidConfigError("a compound state needs 'states'", path=tpath)
        if node.parent is None and declared == "final":
            raise InvalidConfigError("the root cannot be a final state", path=tpath)
        return str(declared)

    def _initial(self, node: StateNode, raw: Mapping[str, Any]) -> None:
        ipath = _join(node.path, "initial")
        initial = raw.get("initial")
        if node.type != "compound":
            if initial is not None:
                raise InvalidConfigError(
                    f"only a compound state has an 'initial'; this one is {node.type}", path=ipath
                )
            return
        if initial is None:
            node.initial = node.children[0]
            return
        if not isinstance(initial, str) or initial not in node.states:
            raise InvalidConfigError(
                f"'initial' must name a child state ({', '.join(node.states)}), got {initial!r}",
                path=ipath,
            )
        if node.states[initial].type == "history":
            raise InvalidConfigError(
                f"'initial' names the history state {initial!r}; name a real child, and "
                "target the history state from a transition instead",
                path=ipath,
            )
        node.initial = node.states[initial]

    def _details(self, node: StateNode, raw: Mapping[str, Any]) -> None:
        path = node.path
        if node.type == "final":
            for key in ("on", "always", "after", "invoke", "onDone"):
                if raw.get(key):
                    raise InvalidConfigError(
                        "a final state cannot leave: it takes no transitions or invocations",
                        path=_join(path, key),
                    )
        node.entry = self.actions(raw.get("entry"), _join(path, "entry"))
        node.exit = self.actions(raw.get("exit"), _join(path, "exit"))
        node.tags = self._tags(raw.get("tags"), _join(path, "tags"))
        meta = raw.get("meta", {})
        if not isinstance(meta, Mapping):
            raise InvalidConfigError("'meta' must be a dict", path=_join(path, "meta"))
        node.meta = meta
        description = raw.get("description")
        node.description = description if isinstance(description, str) else None
        node.output = raw.get("output")
        node.always = self.transitions_of(node, "", raw.get("always"), _join(path, "always"))
        node.on = self._on(node, raw.get("on"))
        node.after = self._after(node, raw.get("after"))
        node.invoke = self._invoke(node, raw.get("invoke"))
        if "onDone" in raw:
            if node.type not in ("compound", "parallel"):
                raise InvalidConfigError(
                    "only compound and parallel states have 'onDone' (use invoke.onDone for "
                    "a service)",
                    path=_join(path, "onDone"),
                )
            event = done_state_type(node.id)
            done = self.transitions_of(node, event, raw["onDone"], _join(path, "onDone"))
            node.on = {**node.on, event: done}

    def _tags(self, raw: Any, path: str) -> frozenset[str]:
        if raw is None:
            return frozenset()
        if isinstance(raw, str):
            return frozenset((raw,))
        if not isinstance(raw, (list, tuple)) or not all(isinstance(t, str) for t in raw):
            raise InvalidConfigError("'tags' must be a list of str", path=path)
        return frozenset(raw)

    def _on(self, node: StateNode, raw: Any) -> dict[str, tuple[Transition, ...]]:
        if raw is None:
            return {}
        opath = _join(node.path, "on")
        if not isinstance(raw, Mapping):
            raise InvalidConfigError(
                f"'on' must map event names to transitions, got {type(raw).__name__}", path=opath
            )
        table: dict[str, tuple[Transition, ...]] = {}
        for event, spec in raw.items():
            if event == "":
                # XState v4 spelled eventless transitions as the "" event.
                eventless = self.transitions_of(node, "", spec, _join(opath, '""'))
                node.always = (*node.always, *eventless)
                continue
            if not isinstance(event, str):
                raise InvalidConfigError(
                    f"event name {event!r} must be a str", path=_join(opath, str(event))
                )
            if "*" in event and not is_descriptor(event):
                raise InvalidConfigError(
                    f"event descriptor {event!r}: '*' must be the whole name or a last "
                    "'.*' segment (like 'order.*')",
                    path=_join(opath, event),
                )
            table[event] = self.transitions_of(node, event, spec, _join(opath, event))
        return table

    def transitions_of(
        self, node: StateNode, event: str, raw: Any, path: str
    ) -> tuple[Transition, ...]:
        """Parse one transition spec: a target str, a dict, or a list of guarded candidates."""
        if raw is None:
            return ()
        items = raw if isinstance(raw, list) else [raw]
        result = []
        for index, item in enumerate(items):
            ipath = f"{path}[{index}]" if isinstance(raw, list) else path
            result.append(self._transition(node, event, item, ipath))
        return tuple(result)

    def _transition(self, node: StateNode, event: str, raw: Any, path: str) -> Transition:
        trans = Transition(node, event, path)
        if isinstance(raw, str):
            raw = {"target": raw}
        if not isinstance(raw, Mapping):
            raise InvalidConfigError(
                f"a transition must be a target str or a dict, got {type(raw).__name__}",
                path=path,
            )
        self._check_keys(raw, TRANSITION_KEYS, path)
        target = raw.get("target")
        if target is None:
            trans.target_ids = ()
        elif isinstance(target, str) and target:
            trans.target_ids = (target,)
        elif isinstance(target, list) and target and all(isinstance(t, str) for t in target):
            trans.target_ids = tuple(target)
        else:
            raise InvalidConfigError(
                f"'target' must be a state reference or a list of them, got {target!r}",
                path=_join(path, "target"),
            )
        guard_key = "guard" if "guard" in raw else "cond"
        trans.guard = self.guard(raw.get(guard_key), _join(path, guard_key))
        if "in" in raw:
            # XState v4's `in: "state"` on a transition: a stateIn guard, and-ed with its guard.
            state_in = self._state_in({"state": raw["in"]}, _join(path, "in"))
            if trans.guard is None:
                trans.guard = state_in
            else:
                both = GuardDef("and", None, None, path)
                both.combinator = "and"
                both.guards = (state_in, trans.guard)
                trans.guard = both
        trans.actions = self.actions(raw.get("actions"), _join(path, "actions"))
        trans.reenter = self._reenter(raw, path)
        meta = raw.get("meta", {})
        if not isinstance(meta, Mapping):
            raise InvalidConfigError("'meta' must be a dict", path=_join(path, "meta"))
        trans.meta = meta
        description = raw.get("description")
        trans.description = description if isinstance(description, str) else None
        self.transitions.append(trans)
        return trans

    def _reenter(self, raw: Mapping[str, Any], path: str) -> bool:
        reenter = raw.get("reenter", False)
        if "internal" in raw and "reenter" not in raw:
            reenter = not raw["internal"]
        if not isinstance(reenter, bool):
            raise InvalidConfigError(
                f"'reenter' must be true or false, got {reenter!r}", path=_join(path, "reenter")
            )
        return reenter

    def actions(self, raw: Any, path: str) -> tuple[ActionDef, ...]:
        """Parse an action list: a name, a ``{type, params}`` dict, or a list of those."""
        if raw is None:
            return ()
        items = raw if isinstance(raw, list) else [raw]
        result = []
        for index, item in enumerate(items):
            ipath = f"{path}[{index}]" if isinstance(raw, list) else path
            if isinstance(item, str) and item:
                result.append(ActionDef(item, None, None, ipath))
            elif isinstance(item, Mapping) and isinstance(item.get("type"), str) and item["type"]:
                params = item.get("params")
                if params is None and canonical_builtin(item["type"]) is not None:
                    params = {k: v for k, v in item.items() if k != "type"} or None
                result.append(ActionDef(item["type"], params, None, ipath))
            else:
                raise InvalidConfigError(
                    f"an action must be a name or a {{'type', 'params'}} dict, got {item!r}",
                    path=ipath,
                )
        return tuple(result)

    def guard(self, raw: Any, path: str) -> GuardDef | None:
        """Parse a guard: a name, a ``{type, params}`` dict, ``stateIn`` or a combinator."""
        if raw is None:
            return None
        if isinstance(raw, str) and raw:
            return GuardDef(raw, None, None, path)
        if isinstance(raw, Mapping) and isinstance(raw.get("type"), str) and raw["type"]:
            kind = raw["type"].removeprefix("xstate.")
            if kind in ("and", "or", "not"):
                return self._combinator(kind, raw, path)
            if kind == "stateIn":
                return self._state_in(raw, path)
            return GuardDef(raw["type"], raw.get("params"), None, path)
        raise InvalidConfigError(
            f"a guard must be a name or a {{'type', 'params'}} dict, got {raw!r}", path=path
        )

    def _combinator(self, kind: str, raw: Mapping[str, Any], path: str) -> GuardDef:
        raw_params = raw.get("params")
        params: Mapping[str, Any] = raw_params if isinstance(raw_params, Mapping) else {}
        operands = raw.get("guards", params.get("guards"))
        if operands is None and kind == "not":
            single = raw.get("guard", params.get("guard"))
            operands = None if single is None else [single]
        if not isinstance(operands, list) or not operands or (kind == "not" and len(operands) != 1):
            need = "one guard under 'guard'" if kind == "not" else "a non-empty 'guards' list"
            raise InvalidConfigError(f"a {kind!r} guard needs {need}", path=path)
        guard = GuardDef(kind, None, None, path)
        guard.combinator = kind
        parsed = []
        for index, operand in enumerate(operands):
            child = self.guard(operand, f"{path}.guards[{index}]")
            assert child is not None
            parsed.append(child)
        guard.guards = tuple(parsed)
        return guard

    def _state_in(self, raw: Mapping[str, Any], path: str) -> GuardDef:
        params = raw.get("params")
        ref = params.get("state", params.get("id")) if isinstance(params, Mapping) else params
        ref = raw.get("state", ref)
        if not isinstance(ref, str) or not ref:
            raise InvalidConfigError(
                "a 'stateIn' guard names its state: {'type': 'stateIn', 'params': {'state': "
                "'#id'}}",
                path=path,
            )
        guard = GuardDef("stateIn", params, None, path)
        guard.combinator = "stateIn"
        guard.state_ref = ref
        return guard

    def _after(self, node: StateNode, raw: Any) -> tuple[AfterDef, ...]:
        if raw is None:
            return ()
        apath = _join(node.path, "after")
        if not isinstance(raw, Mapping):
            raise InvalidConfigError(
                "'after' must map a delay (milliseconds or a delay name) to transitions",
                path=apath,
            )
        result = []
        for key, spec in raw.items():
            skey = str(key)
            kpath = _join(apath, skey)
            after = AfterDef(skey, after_event_type(skey, node.id), apath)
            after.delay_ms = _literal_delay(key, apath)
            if after.delay_ms is None and (not isinstance(key, str) or not key.strip()):
                raise InvalidConfigError(
                    f"delay {key!r} is neither milliseconds nor a delay name", path=apath
                )
            after.transitions = self.transitions_of(node, after.event_type, spec, kpath)
            result.append(after)
            self.afters.append(after)
        return tuple(result)

    def _invoke(self, node: StateNode, raw: Any) -> tuple[InvokeDef, ...]:
        if raw is None:
            return ()
        ipath = _join(node.path, "invoke")
        items = raw if isinstance(raw, list) else [raw]
        result = []
        for index, item in enumerate(items):
            path = f"{ipath}[{index}]" if isinstance(raw, list) else ipath
            if not isinstance(item, Mapping):
                raise InvalidConfigError("an invoke must be a dict with a 'src'", path=path)
            self._check_keys(item, INVOKE_KEYS, path)
            src = item.get("src")
            if isinstance(src, Mapping):
                src = src.get("type")
            if not isinstance(src, str) or not src:
                raise InvalidConfigError(
                    f"an invoke needs a 'src' naming a service, got {src!r}",
                    path=_join(path, "src"),
                )
            default_id = node.id if len(items) == 1 else f"{node.id}:invocation[{index}]"
            invoke_id = item.get("id", default_id)
            if not isinstance(invoke_id, str) or not invoke_id:
                raise InvalidConfigError("an invoke 'id' must be a non-empty str", path=path)
            inv = InvokeDef(node, src, invoke_id, path)
            inv.input = item.get("input")
            inv.on_done = self.transitions_of(
                node, inv.done_type, item.get("onDone"), _join(path, "onDone")
            )
            inv.on_error = self.transitions_of(
                node, inv.error_type, item.get("onError"), _join(path, "onError")
            )
            result.append(inv)
            self.invokes.append(inv)
        return tuple(result)


def _literal_delay(key: Any, path: str) -> float | None:
    """The milliseconds of a numeric ``after`` key, or None when the key names a delay."""
    if isinstance(key, bool):
        raise InvalidConfigError(f"delay {key!r} is not a number of milliseconds", path=path)
    if isinstance(key, (int, float)):
        value = float(key)
    else:
        try:
            value = float(str(key))
        except ValueError:
            return None
    if not math.isfinite(value) or value < 0:
        raise InvalidConfigError(
            f"delay {key!r} must be a finite number of milliseconds >= 0",
            path=_join(path, str(key)),
        )
    return value
