"""Lay out an XState-style chart as nested boxes: the geometry behind the admin diagram.

Siblings go in columns by their distance from the initial state (parallel regions side by
side), states joined by a transition inside one column sit next to each other, and
columns leave room for the longest transition label drawn between them. A compound state
that would come out wider than ``MAX_WIDTH`` that way is laid out top-down instead (the
same groups as rows), so a long saga fits an admin page rather than running off its side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_WIDTH", "Edge", "Node", "build", "edges", "layout", "walk"]

#: Widest box (px) a compound state is drawn left to right; a wider one goes top-down.
MAX_WIDTH = 960.0

_CHAR_W = 7.2
_ATOMIC_H = 40.0
TAG_H = 14.0
_PAD = 16.0
_GAP = 34.0
_ROW_GAP = 30.0
_MAX_LABEL_GAP = 240.0
_HEADER = 24.0
_TOP_DOWN_GAP = 56.0


@dataclass
class Node:
    path: str
    key: str
    kind: str
    config: Mapping[str, Any]
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0
    #: ``"LR"``: groups of children are columns; ``"TB"``: they are rows.
    direction: str = "LR"

    @property
    def tags(self) -> list[str]:
        raw = self.config.get("tags") or []
        return [raw] if isinstance(raw, str) else [str(t) for t in raw]


@dataclass(frozen=True)
class Edge:
    source: Node
    target: Node
    label: str


def build(chart: Mapping[str, Any]) -> Node:
    root = Node(
        path=str(chart.get("id") or "machine"),
        key=str(chart.get("id") or "machine"),
        kind=_kind(chart),
        config=chart,
    )
    _add_children(root)
    return root


def _kind(config: Mapping[str, Any]) -> str:
    declared = config.get("type")
    if declared in ("parallel", "final", "history"):
        return str(declared)
    return "compound" if config.get("states") else "atomic"


def _add_children(node: Node) -> None:
    states = node.config.get("states") or {}
    for key, config in states.items():
        child_config = config if isinstance(config, Mapping) else {}
        child = Node(
            path=f"{node.path}.{key}",
            key=str(key),
            kind=_kind(child_config),
            config=child_config,
            parent=node,
        )
        node.children.append(child)
        _add_children(child)


def walk(node: Node) -> Iterable[Node]:
    yield node
    for child in node.children:
        yield from walk(child)


def _measure(node: Node) -> None:
    label_w = _CHAR_W * len(node.key) + 2 * _PAD
    tag_w = _CHAR_W * len(", ".join(node.tags)) + 2 * _PAD if node.tags else 0.0
    if not node.children:
        node.w = max(96.0, label_w, tag_w)
        node.h = _ATOMIC_H + (TAG_H if node.tags else 0.0)
        return
    for child in node.children:
        _measure(child)
    columns = _columns(node)
    gap = _column_gap(node)
    if node.direction == "TB":
        inner_w = max(sum(c.w for c in row) + gap * (len(row) - 1) for row in columns)
        inner_h = sum(max(c.h for c in row) for row in columns)
        inner_h += _TOP_DOWN_GAP * (len(columns) - 1)
    else:
        inner_w = sum(max(c.w for c in col) for col in columns) + gap * (len(columns) - 1)
        inner_h = max(sum(c.h for c in col) + _ROW_GAP * (len(col) - 1) for col in columns)
    node.w = max(label_w, tag_w, inner_w + 2 * _PAD)
    node.h = _HEADER + (TAG_H if node.tags else 0.0) + inner_h + 2 * _PAD


def _place(node: Node, x: float, y: float) -> None:
    node.x, node.y = x, y
    if not node.children:
        return
    cx = x + _PAD
    top = y + _HEADER + (TAG_H if node.tags else 0.0) + _PAD
    gap = _column_gap(node)
    if node.direction == "TB":
        _place_rows(node, top, gap)
        return
    for col in _columns(node):
        cy = top
        for child in col:
            _place(child, cx, cy)
            cy += child.h + _ROW_GAP
        cx += max(c.w for c in col) + gap


def _place_rows(node: Node, top: float, gap: float) -> None:
    """Top-down: each group of children is a row, centred in the box."""
    cy = top
    for row in _columns(node):
        width = sum(c.w for c in row) + gap * (len(row) - 1)
        cx = node.x + (node.w - width) / 2
        for child in row:
            _place(child, cx, cy)
            cx += child.w + gap
        cy += max(c.h for c in row) + _TOP_DOWN_GAP


def _columns(node: Node) -> list[list[Node]]:
    """Group children by their distance from the initial child (parallel: one per region)."""
    if node.kind == "parallel":
        return [[child] for child in node.children]
    by_key = {child.key: child for child in node.children}
    start = by_key.get(str(node.config.get("initial")), node.children[0])
    rank = {start.key: 0}
    queue = [start]
    while queue:
        current = queue.pop(0)
        for target in _sibling_targets(current, node):
            if target.key not in rank:
                rank[target.key] = rank[current.key] + 1
                queue.append(target)
    last = max(rank.values())
    columns: list[list[Node]] = [[] for _ in range(last + 2)]
    for child in node.children:
        columns[rank.get(child.key, last + 1)].append(child)
    return [_keep_linked_adjacent(col, node) for col in columns if col]


def _keep_linked_adjacent(column: list[Node], parent: Node) -> list[Node]:
    """Order a column so states joined by a transition sit next to each other.

    A transition between two states of one column is drawn as a vertical arrow; with a
    third state between them, the arrow would run through that state's box.
    """
    members = {id(n) for n in column}
    links: dict[int, list[Node]] = {id(n): [] for n in column}
    for source in column:
        for target in _sibling_targets(source, parent):
            if id(target) in members and target is not source:
                links[id(source)].append(target)
                links[id(target)].append(source)
    ordered: list[Node] = []
    seen: set[int] = set()

    def visit(current: Node) -> None:
        seen.add(id(current))
        ordered.append(current)
        for other in sorted(links[id(current)], key=column.index):
            if id(other) not in seen:
                visit(other)

    for candidate in column:
        if id(candidate) not in seen:
            visit(candidate)
    return ordered


def _sibling_targets(child: Node, parent: Node) -> list[Node]:
    found: list[Node] = []
    for source in walk(child):
        for raw, _label in _transitions(source.config):
            resolved = _resolve(source, raw)
            while resolved is not None and resolved.parent is not parent:
                resolved = resolved.parent
            if resolved is not None and resolved is not child:
                found.append(resolved)
    return found


def _transitions(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (raw target, label) pair a state declares."""
    pairs: list[tuple[str, str]] = []
    for event, spec in (config.get("on") or {}).items():
        pairs += [(t, _with_guard(str(event), g)) for t, g in _targets(spec)]
    for delay, spec in (config.get("after") or {}).items():
        pairs += [(t, _with_guard(f"after {delay}", g)) for t, g in _targets(spec)]
    pairs += [(t, _with_guard("always", g)) for t, g in _targets(config.get("always"))]
    pairs += [(t, _with_guard("done", g)) for t, g in _targets(config.get("onDone"))]
    invokes = config.get("invoke") or []
    for inv in [invokes] if isinstance(invokes, Mapping) else invokes:
        if isinstance(inv, Mapping):
            src = inv.get("src") if isinstance(inv.get("src"), str) else "invoke"
            pairs += [(t, _with_guard(f"done: {src}", g)) for t, g in _targets(inv.get("onDone"))]
            pairs += [(t, _with_guard(f"error: {src}", g)) for t, g in _targets(inv.get("onError"))]
    return pairs


def _targets(spec: Any) -> list[tuple[str, str | None]]:
    if spec is None:
        return []
    if isinstance(spec, str):
        return [(spec, None)]
    if isinstance(spec, Mapping):
        guard = spec.get("guard", spec.get("cond"))
        raw = spec.get("target")
        targets = raw if isinstance(raw, list) else [raw]
        return [(str(t), guard if isinstance(guard, str) else None) for t in targets if t]
    if isinstance(spec, list):
        return [pair for item in spec for pair in _targets(item)]
    return []


def _with_guard(label: str, guard: str | None) -> str:
    return f"{label} [{guard}]" if guard else label


def _resolve(source: Node, raw: str) -> Node | None:
    """Find the node a target string names, the way the engine resolves it."""
    root = source
    while root.parent is not None:
        root = root.parent
    if raw.startswith("#"):
        wanted = raw[1:]
        for node in walk(root):
            if node.config.get("id") == wanted or node.path == wanted:
                return node
        head, _, rest = wanted.partition(".")
        return _descend(root, rest) if head == root.key and rest else None
    if raw.startswith("."):
        return _descend(source, raw[1:])
    base = source.parent or root
    return _descend(base, raw) or _descend(root, raw)


def _descend(node: Node, dotted: str) -> Node | None:
    current: Node | None = node
    for key in dotted.split("."):
        current = next((c for c in current.children if c.key == key), None) if current else None
    return current


def edges(nodes: list[Node]) -> list[Edge]:
    """Every drawable transition; several between the same two states share one arrow."""
    labels: dict[tuple[int, int], list[str]] = {}
    ends: dict[tuple[int, int], tuple[Node, Node]] = {}
    for source in nodes:
        for raw, label in _transitions(source.config):
            target = _resolve(source, raw)
            if target is not None:
                pair = (id(source), id(target))
                ends[pair] = (source, target)
                labels.setdefault(pair, []).append(label)
    return [Edge(*ends[pair], "\n".join(text)) for pair, text in labels.items()]


def _column_gap(node: Node) -> float:
    """Room between columns for the longest transition label drawn inside ``node``."""
    longest = max(
        (len(label) for sub in walk(node) for _raw, label in _transitions(sub.config)),
        default=0,
    )
    return min(_MAX_LABEL_GAP, max(_GAP, _CHAR_W * 0.85 * longest + 24))


def layout(root: Node, max_width: float = MAX_WIDTH) -> None:
    """Size every box and place the tree with its top-left corner at (10, 10).

    From the outside in, a compound state wider than ``max_width`` is turned top-down when
    that makes it narrower; its children are then judged at their own widths.
    """
    _measure(root)
    for node in list(walk(root)):
        if not node.children or node.w <= max_width:
            continue
        wide = node.w
        node.direction = "TB"
        _measure(root)
        if node.w >= wide:
            node.direction = "LR"
            _measure(root)
    _place(root, 10.0, 10.0)
