"""Draw an XState-style chart as inline SVG, with one state marked.

The admin shows where a dead letter stopped without sending the chart to an outside
renderer: the layout is computed here from the chart JSON alone. Siblings are placed in
columns by their distance from the initial state, compound states are nested boxes,
parallel regions sit side by side, and transitions are arrows labelled with their event.
The drawing is plain, but it is deterministic and needs nothing beyond the standard library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any

__all__ = ["render_chart_svg"]

_CHAR_W = 7.2
_ATOMIC_H = 40.0
_TAG_H = 14.0
_PAD = 16.0
_GAP = 34.0
_ROW_GAP = 30.0
_MAX_LABEL_GAP = 240.0
_HEADER = 24.0


@dataclass
class _Node:
    path: str
    key: str
    kind: str
    config: Mapping[str, Any]
    parent: _Node | None = None
    children: list[_Node] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0

    @property
    def tags(self) -> list[str]:
        raw = self.config.get("tags") or []
        return [raw] if isinstance(raw, str) else [str(t) for t in raw]


@dataclass(frozen=True)
class _Edge:
    source: _Node
    target: _Node
    label: str


def render_chart_svg(
    chart: Mapping[str, Any], *, marked: str | None = None, title: str | None = None
) -> str:
    """Return an ``<svg>`` document drawing ``chart``.

    Args:
        chart: The chart dict (XState JSON: ``id``, ``initial``, ``states`` ...).
        marked: Full dotted id of the state to highlight (``job.deadLettered``); a bare key
            or a path without the machine id also matches.
        title: Accessible title; defaults to the chart id.
    """
    root = _build(chart)
    nodes = list(_walk(root))
    _measure(root)
    _place(root, 10.0, 10.0)
    edges = _edges(nodes)
    target = _find_marked(nodes, marked)
    label = title or f"Chart {root.key}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="xsm-chart" role="img" '
        f'width="{root.w + 20:.0f}" height="{root.h + 20:.0f}" '
        f'viewBox="0 0 {root.w + 20:.0f} {root.h + 20:.0f}" aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
        _DEFS,
    ]
    parts.extend(_draw_node(node, node is target) for node in nodes)
    parts.extend(_draw_initial(node) for node in nodes if node.children)
    parts.extend(_draw_edge(edge) for edge in edges)
    parts.append("</svg>")
    return "".join(p for p in parts if p)


_DEFS = (
    '<defs><marker id="xsm-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
    'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
    'fill="#555"/></marker></defs>'
)


def _build(chart: Mapping[str, Any]) -> _Node:
    root = _Node(path=str(chart.get("id") or "machine"), key=str(chart.get("id") or "machine"),
                 kind=_kind(chart), config=chart)
    _add_children(root)
    return root


def _kind(config: Mapping[str, Any]) -> str:
    declared = config.get("type")
    if declared in ("parallel", "final", "history"):
        return str(declared)
    return "compound" if config.get("states") else "atomic"


def _add_children(node: _Node) -> None:
    states = node.config.get("states") or {}
    for key, config in states.items():
        child_config = config if isinstance(config, Mapping) else {}
        child = _Node(path=f"{node.path}.{key}", key=str(key), kind=_kind(child_config),
                      config=child_config, parent=node)
        node.children.append(child)
        _add_children(child)


def _walk(node: _Node) -> Iterable[_Node]:
    yield node
    for child in node.children:
        yield from _walk(child)


def _measure(node: _Node) -> None:
    label_w = _CHAR_W * len(node.key) + 2 * _PAD
    tag_w = _CHAR_W * len(", ".join(node.tags)) + 2 * _PAD if node.tags else 0.0
    if not node.children:
        node.w = max(96.0, label_w, tag_w)
        node.h = _ATOMIC_H + (_TAG_H if node.tags else 0.0)
        return
    for child in node.children:
        _measure(child)
    columns = _columns(node)
    gap = _column_gap(node)
    inner_w = sum(max(c.w for c in col) for col in columns) + gap * (len(columns) - 1)
    inner_h = max(sum(c.h for c in col) + _ROW_GAP * (len(col) - 1) for col in columns)
    node.w = max(label_w, tag_w, inner_w + 2 * _PAD)
    node.h = _HEADER + (_TAG_H if node.tags else 0.0) + inner_h + 2 * _PAD


def _place(node: _Node, x: float, y: float) -> None:
    node.x, node.y = x, y
    if not node.children:
        return
    cx = x + _PAD
    top = y + _HEADER + (_TAG_H if node.tags else 0.0) + _PAD
    gap = _column_gap(node)
    for col in _columns(node):
        cy = top
        for child in col:
            _place(child, cx, cy)
            cy += child.h + _ROW_GAP
        cx += max(c.w for c in col) + gap


def _columns(node: _Node) -> list[list[_Node]]:
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
    columns: list[list[_Node]] = [[] for _ in range(last + 2)]
    for child in node.children:
        columns[rank.get(child.key, last + 1)].append(child)
    return [_keep_linked_adjacent(col, node) for col in columns if col]


def _keep_linked_adjacent(column: list[_Node], parent: _Node) -> list[_Node]:
    """Order a column so states joined by a transition sit next to each other.

    A transition between two states of one column is drawn as a vertical arrow; with a
    third state between them, the arrow would run through that state's box.
    """
    members = {id(n) for n in column}
    links: dict[int, list[_Node]] = {id(n): [] for n in column}
    for source in column:
        for target in _sibling_targets(source, parent):
            if id(target) in members and target is not source:
                links[id(source)].append(target)
                links[id(target)].append(source)
    ordered: list[_Node] = []
    seen: set[int] = set()

    def visit(current: _Node) -> None:
        seen.add(id(current))
        ordered.append(current)
        for other in sorted(links[id(current)], key=column.index):
            if id(other) not in seen:
                visit(other)

    for candidate in column:
        if id(candidate) not in seen:
            visit(candidate)
    return ordered


def _sibling_targets(child: _Node, parent: _Node) -> list[_Node]:
    found: list[_Node] = []
    for source in _walk(child):
        for raw, _label in _transitions(source.config):
            resolved = _resolve(source, raw, parent)
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


def _resolve(source: _Node, raw: str, scope: _Node | None = None) -> _Node | None:
    """Find the node a target string names, the way the engine resolves it."""
    root = source
    while root.parent is not None:
        root = root.parent
    if raw.startswith("#"):
        wanted = raw[1:]
        for node in _walk(root):
            if node.config.get("id") == wanted or node.path == wanted:
                return node
        head, _, rest = wanted.partition(".")
        return _descend(root, rest) if head == root.key and rest else None
    if raw.startswith("."):
        return _descend(source, raw[1:])
    base = source.parent or root
    return _descend(base, raw) or _descend(root, raw)


def _descend(node: _Node, dotted: str) -> _Node | None:
    current: _Node | None = node
    for key in dotted.split("."):
        current = next((c for c in current.children if c.key == key), None) if current else None
    return current


def _edges(nodes: list[_Node]) -> list[_Edge]:
    """Every drawable transition; several between the same two states share one arrow."""
    labels: dict[tuple[int, int], list[str]] = {}
    ends: dict[tuple[int, int], tuple[_Node, _Node]] = {}
    for source in nodes:
        for raw, label in _transitions(source.config):
            target = _resolve(source, raw)
            if target is not None:
                pair = (id(source), id(target))
                ends[pair] = (source, target)
                labels.setdefault(pair, []).append(label)
    return [_Edge(*ends[pair], "\n".join(text)) for pair, text in labels.items()]


def _column_gap(node: _Node) -> float:
    """Room between columns for the longest transition label drawn inside ``node``."""
    longest = max(
        (len(label) for sub in _walk(node) for _raw, label in _transitions(sub.config)),
        default=0,
    )
    return min(_MAX_LABEL_GAP, max(_GAP, _CHAR_W * 0.85 * longest + 24))


def _find_marked(nodes: list[_Node], marked: str | None) -> _Node | None:
    if not marked:
        return None
    for candidate in (marked, f"{nodes[0].key}.{marked}"):
        for node in nodes:
            if node.path == candidate:
                return node
    tail = marked.rsplit(".", 1)[-1]
    matches = [node for node in nodes if node.key == tail]
    return matches[0] if len(matches) == 1 else None


def _draw_node(node: _Node, marked: bool) -> str:
    classes = ["xsm-state", f"xsm-{node.kind}"]
    if marked:
        classes.append("xsm-marked")
    fill = "#fde2e1" if marked else ("#ffffff" if not node.children else "#f6f8fa")
    stroke = "#c62828" if marked else "#607080"
    width = 3 if marked else 1.2
    in_region = node.parent is not None and node.parent.kind == "parallel"
    dash = ' stroke-dasharray="5 3"' if in_region else ""
    out = [
        f'<g class="{" ".join(classes)}" data-state="{escape(node.path)}">',
        f'<rect x="{node.x:.1f}" y="{node.y:.1f}" width="{node.w:.1f}" height="{node.h:.1f}" '
        f'rx="8" fill="{fill}" stroke="{stroke}" stroke-width="{width}"{dash}/>',
    ]
    if node.kind == "final":
        out.append(
            f'<rect x="{node.x + 4:.1f}" y="{node.y + 4:.1f}" width="{node.w - 8:.1f}" '
            f'height="{node.h - 8:.1f}" rx="6" fill="none" stroke="{stroke}"/>'
        )
    text_y = node.y + (17 if node.children else 24)
    weight = "bold" if marked or node.children else "normal"
    out.append(
        f'<text x="{node.x + node.w / 2:.1f}" y="{text_y:.1f}" text-anchor="middle" '
        f'font-family="sans-serif" font-size="12" font-weight="{weight}">{escape(node.key)}</text>'
    )
    if node.tags:
        out.append(
            f'<text x="{node.x + node.w / 2:.1f}" y="{text_y + _TAG_H:.1f}" text-anchor="middle" '
            f'font-family="sans-serif" font-size="10" fill="#8a4b00">'
            f"{escape(', '.join(node.tags))}</text>"
        )
    if marked:
        out.append(f"<title>dead letter stopped here: {escape(node.path)}</title>")
    out.append("</g>")
    return "".join(out)


def _draw_initial(node: _Node) -> str:
    if node.kind == "parallel":
        return ""
    first = next((c for c in node.children if c.key == node.config.get("initial")), None)
    if first is None:
        return ""
    dot_x, dot_y = first.x - 14, first.y + 10
    return (
        f'<circle cx="{dot_x:.1f}" cy="{dot_y:.1f}" r="4" fill="#333"/>'
        f'<line x1="{dot_x + 4:.1f}" y1="{dot_y:.1f}" x2="{first.x:.1f}" y2="{dot_y:.1f}" '
        'stroke="#333" marker-end="url(#xsm-arrow)"/>'
    )


def _draw_edge(edge: _Edge) -> str:
    src, dst = edge.source, edge.target
    if src is dst:
        x, y = src.x + src.w - 14, src.y
        return (
            f'<g class="xsm-edge"><path d="M{x:.1f},{y:.1f} c 10,-26 30,-6 14,{12:.0f}" '
            'fill="none" stroke="#555" marker-end="url(#xsm-arrow)"/>'
            f'<text x="{x + 18:.1f}" y="{y - 12:.1f}" font-family="sans-serif" font-size="10" '
            f'fill="#333">{escape(edge.label)}</text></g>'
        )
    x1, y1 = _border(src, dst.x + dst.w / 2, dst.y + dst.h / 2)
    x2, y2 = _border(dst, src.x + src.w / 2, src.y + src.h / 2)
    backward = x2 < x1 or (x2 == x1 and y2 < y1)
    bend = 22.0 if backward else 0.0
    mx, my = (x1 + x2) / 2, (y1 + y2) / 2 - bend
    lines = edge.label.split("\n")
    first_y = my - 4 - 12 * (len(lines) - 1) if backward or y2 <= y1 else my - 4
    spans = "".join(
        f'<tspan x="{mx:.1f}" y="{first_y + 12 * n:.1f}">{escape(line)}</tspan>'
        for n, line in enumerate(lines)
    )
    return (
        f'<g class="xsm-edge"><path d="M{x1:.1f},{y1:.1f} Q{mx:.1f},{my - bend:.1f} '
        f'{x2:.1f},{y2:.1f}" fill="none" stroke="#555" marker-end="url(#xsm-arrow)"/>'
        f'<text text-anchor="middle" font-family="sans-serif" font-size="10" fill="#333" '
        f'paint-order="stroke" stroke="#fff" stroke-width="3">{spans}</text></g>'
    )


def _border(node: _Node, toward_x: float, toward_y: float) -> tuple[float, float]:
    """The point where the line from the node's centre toward a point leaves its box."""
    cx, cy = node.x + node.w / 2, node.y + node.h / 2
    dx, dy = toward_x - cx, toward_y - cy
    if dx == 0 and dy == 0:
        return cx, node.y
    scale = min(
        (node.w / 2) / abs(dx) if dx else float("inf"),
        (node.h / 2) / abs(dy) if dy else float("inf"),
    )
    return cx + dx * scale, cy + dy * scale
