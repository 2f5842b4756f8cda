"""Draw an XState-style chart as inline SVG, with one state marked.

The admin shows where a dead letter stopped without sending the chart to an outside
renderer: :mod:`~xsm_celery.charttools.layout` places the boxes from the chart JSON alone,
and this module draws them, with transitions as arrows labelled by their event. A label
goes at the first point along its arrow where it covers no state and no other label, so
labels never overlap one another. Every text taken from the chart is escaped, so the markup
can go into a page as is. The drawing is
plain, but it is deterministic and needs nothing beyond the standard library; the admin and
``xsm diagram --format svg`` share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from html import escape
from typing import Any

from xsm_celery.charttools.layout import TAG_H, Edge, Node, build, edges, layout, walk

#: Width (px) a character of the 10 px label font is given, rounded up for wide fonts.
_LABEL_CHAR_W = 6.6
#: Distance (px) between the baselines of a label's lines.
_LINE_H = 12.0
#: Header height (px) of a compound state, where its name is written.
_TITLE_H = 24.0

__all__ = ["render_chart_svg"]


def render_chart_svg(
    chart: Mapping[str, Any],
    *,
    marked: str | Iterable[str] | None = None,
    title: str | None = None,
) -> str:
    """Return an ``<svg>`` document drawing ``chart``.

    Args:
        chart: The chart dict (XState JSON: ``id``, ``initial``, ``states`` ...).
        marked: Full dotted id of the state to highlight (``job.deadLettered``), or several
            (a workflow instance's active states); a bare key or a path without the machine
            id also matches.
        title: Accessible title; defaults to the chart id.
    """
    root = build(chart)
    nodes = list(walk(root))
    layout(root)
    arrows = edges(nodes)
    wanted = [marked] if isinstance(marked, str) or marked is None else list(marked)
    targets = [found for m in wanted if (found := _find_marked(nodes, m)) is not None]
    label = title or f"Chart {root.key}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="xsm-chart" role="img" '
        f'width="{root.w + 20:.0f}" height="{root.h + 20:.0f}" '
        f'viewBox="0 0 {root.w + 20:.0f} {root.h + 20:.0f}" aria-label="{escape(label)}">',
        f"<title>{escape(label)}</title>",
        _DEFS,
    ]
    parts.extend(_draw_node(node, any(node is t for t in targets)) for node in nodes)
    parts.extend(_draw_initial(node) for node in nodes if node.children)
    placer = _LabelPlacer(nodes)
    parts.extend(_draw_edge(edge, placer) for edge in arrows)
    parts.append("</svg>")
    return "".join(p for p in parts if p)


_DEFS = (
    '<defs><marker id="xsm-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
    'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
    'fill="#555"/></marker></defs>'
)


def _find_marked(nodes: list[Node], marked: str | None) -> Node | None:
    if not marked:
        return None
    for candidate in (marked, f"{nodes[0].key}.{marked}"):
        for node in nodes:
            if node.path == candidate:
                return node
    tail = marked.rsplit(".", 1)[-1]
    matches = [node for node in nodes if node.key == tail]
    return matches[0] if len(matches) == 1 else None


def _draw_node(node: Node, marked: bool) -> str:
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
            f'<text x="{node.x + node.w / 2:.1f}" y="{text_y + TAG_H:.1f}" text-anchor="middle" '
            f'font-family="sans-serif" font-size="10" fill="#8a4b00">'
            f"{escape(', '.join(node.tags))}</text>"
        )
    if marked:
        out.append(f"<title>dead letter stopped here: {escape(node.path)}</title>")
    out.append("</g>")
    return "".join(out)


def _draw_initial(node: Node) -> str:
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


@dataclass(frozen=True)
class _Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def hits(self, other: _Box, margin: float = 2.0) -> bool:
        return (
            self.x0 < other.x1 + margin
            and other.x0 < self.x1 + margin
            and self.y0 < other.y1 + margin
            and other.y0 < self.y1 + margin
        )


class _LabelPlacer:
    """Chooses where each edge label goes: off every state box and every label placed so far."""

    def __init__(self, nodes: list[Node]) -> None:
        self.states = [
            _Box(n.x, n.y, n.x + n.w, n.y + (_TITLE_H if n.children else n.h)) for n in nodes[1:]
        ]
        self.labels: list[_Box] = []

    def place(self, lines: list[str], spots: list[tuple[float, float]]) -> tuple[float, float]:
        """The first spot (label centre, first baseline) that is free; the label is kept.

        A spot covering no state and no label wins; else one covering no label; else the
        first spot moved down line by line until it covers no label (always found: the
        labels placed so far are finitely many).
        """
        width = max(len(line) for line in lines) * _LABEL_CHAR_W + 4
        height = _LINE_H * (len(lines) - 1)

        def box(x: float, y: float) -> _Box:
            return _Box(x - width / 2, y - 10, x + width / 2, y + height + 3)

        def free(candidate: _Box, of: list[_Box]) -> bool:
            return not any(candidate.hits(other) for other in of)

        chosen = next((s for s in spots if free(box(*s), self.states + self.labels)), None)
        if chosen is None:
            chosen = next((s for s in spots if free(box(*s), self.labels)), None)
        if chosen is None:
            x, y = spots[0]
            while not free(box(x, y), self.labels):
                y += _LINE_H
            chosen = (x, y)
        self.labels.append(box(*chosen))
        return chosen


def _along(
    start: tuple[float, float], control: tuple[float, float], end: tuple[float, float], t: float
) -> tuple[float, float]:
    """The point at ``t`` (0..1) of the quadratic curve an edge is drawn as."""
    u = 1 - t
    return (
        u * u * start[0] + 2 * u * t * control[0] + t * t * end[0],
        u * u * start[1] + 2 * u * t * control[1] + t * t * end[1],
    )


def _label_spots(
    start: tuple[float, float], control: tuple[float, float], end: tuple[float, float], n: int
) -> list[tuple[float, float]]:
    """Label positions along the curve, middle first, each also a line above and below."""
    spots = []
    for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8):
        x, y = _along(start, control, end, t)
        first = y - 4 - _LINE_H * (n - 1) / 2
        spots += [(x, first), (x, first - _LINE_H), (x, first + _LINE_H)]
    return spots


def _text(lines: list[str], x: float, y: float) -> str:
    spans = "".join(
        f'<tspan x="{x:.1f}" y="{y + _LINE_H * n:.1f}">{escape(line)}</tspan>'
        for n, line in enumerate(lines)
    )
    return (
        f'<text text-anchor="middle" font-family="sans-serif" font-size="10" fill="#333" '
        f'paint-order="stroke" stroke="#fff" stroke-width="3">{spans}</text>'
    )


def _draw_edge(edge: Edge, placer: _LabelPlacer) -> str:
    src, dst = edge.source, edge.target
    lines = edge.label.split("\n")
    if src is dst:
        x, y = src.x + src.w - 14, src.y
        width = max(len(line) for line in lines) * _LABEL_CHAR_W
        above = y - 12 - _LINE_H * (len(lines) - 1)
        spots = [(x + 18 + width / 2, above - _LINE_H * k) for k in range(4)]
        return (
            f'<g class="xsm-edge"><path d="M{x:.1f},{y:.1f} c 10,-26 30,-6 14,{12:.0f}" '
            'fill="none" stroke="#555" marker-end="url(#xsm-arrow)"/>'
            f"{_text(lines, *placer.place(lines, spots))}</g>"
        )
    x1, y1 = _border(src, dst.x + dst.w / 2, dst.y + dst.h / 2)
    x2, y2 = _border(dst, src.x + src.w / 2, src.y + src.h / 2)
    backward = x2 < x1 or (x2 == x1 and y2 < y1)
    bend = 22.0 if backward else 0.0
    control = ((x1 + x2) / 2, (y1 + y2) / 2 - 2 * bend)
    spots = _label_spots((x1, y1), control, (x2, y2), len(lines))
    return (
        f'<g class="xsm-edge"><path d="M{x1:.1f},{y1:.1f} Q{control[0]:.1f},{control[1]:.1f} '
        f'{x2:.1f},{y2:.1f}" fill="none" stroke="#555" marker-end="url(#xsm-arrow)"/>'
        f"{_text(lines, *placer.place(lines, spots))}</g>"
    )


def _border(node: Node, toward_x: float, toward_y: float) -> tuple[float, float]:
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
