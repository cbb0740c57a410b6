"""`k.graph()`: the dataflow graph before and after fusion as an SVG picture.

Before fusion the nodes are the Relax ops, each labelled with its source line, and a box around
the ops of each kernel; after fusion the nodes are the kernels. Where graphviz's `dot` program and
its Python package are installed, graphviz lays the picture out; elsewhere a small layered layout
(ranks by longest path, one band of columns per kernel so boxes never overlap) is drawn with
xml.etree, so the picture needs no system package. Its edges run at right angles in the gaps between
ranks and between columns, so they never cross a node (an edge may cross a kernel's dashed box, which
graphviz's splines avoid).
"""
from __future__ import annotations

import functools
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

SVG_NS = "http://www.w3.org/2000/svg"
WHICH = ("both", "before", "after")
# The pure-Python layout's geometry (pixels) and look.
# RANK_GAP leaves, between a kernel box's bottom and the next box's title, a band for horizontal edges;
# COL_GAP, beside every column, a channel for vertical ones. LANE spaces edges that share a band.
CHAR_W, LINE_H, PAD, RANK_GAP, COL_GAP, BOX_PAD, LANE = 7.2, 15, 8, 60, 26, 10, 4
STYLE = {"param": ("#e8f0fe", "#3b6fd8"), "op": ("#ffffff", "#444444"), "kernel": ("#fff4e0", "#c77800"),
         "output": ("#eaf6ea", "#2e7d32")}


@dataclass
class Node:
    id: str
    label: list[str]
    kind: str                     # "param" | "op" | "kernel" | "output"
    box: int | None = None        # the kernel box it is drawn in (before fusion)


@dataclass
class Graph:
    title: str
    nodes: list[Node]
    edges: list[tuple[str, str]]
    boxes: dict[int, str] = field(default_factory=dict)   # box index -> its title


# --------------------------------------------------------------------------------------------------
# the graphs, from a fusion record
# --------------------------------------------------------------------------------------------------

def _where(fmap, kernel_index: int, op_position: int) -> str | None:
    op = fmap[kernel_index].ops[op_position]
    if op.line is None:
        return None
    return f"line {op.line}: {_clip(op.source or '', 28)}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def before_fusion(record: dict, fmap) -> Graph:
    """Ops as nodes, each kernel's ops in a box titled with the kernel's name."""
    kernel_of = {}
    for k, kernel in enumerate(record["kernels"]):
        for position, op in enumerate(kernel["ops"]):
            kernel_of[op] = (k, position)
    nodes = [Node(f"p_{p}", [p], "param") for p in record["params"]]
    for index, op in enumerate(record["ops"]):
        label = [f"{op['op']} → {op['var']}"]
        box = None
        if index in kernel_of:
            box, position = kernel_of[index]
            where = _where(fmap, box, position)
        else:
            where = f"line {op['line']}" if op["line"] is not None else None
        nodes.append(Node(f"o_{index}", label + ([where] if where else []), "op", box))
    nodes.append(Node("out", ["return"], "output"))
    edges = [(_id(ref), f"o_{i}") for i, op in enumerate(record["ops"]) for ref in op["inputs"]]
    edges += [(_id(ref), "out") for ref in record["outputs"]]
    boxes = {k: kernel["name"] for k, kernel in enumerate(record["kernels"]) if kernel["ops"]}
    return Graph("before fusion", nodes, _existing(nodes, edges), boxes)


def after_fusion(record: dict, fmap) -> Graph:
    """Kernels as nodes, labelled with the ops they fused and the source lines those came from."""
    nodes = [Node(f"p_{p}", [p], "param") for p in record["params"]]
    for k, kernel in enumerate(fmap):
        label = [kernel.name]
        if kernel.fused:
            label.append(_clip(" + ".join(op.op for op in kernel.ops), 40))
        if kernel.lines:
            label.append(("lines " if len(kernel.lines) > 1 else "line ") + ", ".join(map(str, kernel.lines)))
        if kernel.cuda_kernels:
            label.append("CUDA " + ", ".join(kernel.cuda_kernels))
        nodes.append(Node(f"k_{k}", label, "kernel"))
    nodes.append(Node("out", ["return"], "output"))
    edges = [(_id(ref), f"k_{k}") for k, kernel in enumerate(record["kernels"]) for ref in kernel["inputs"]]
    edges += [(_id(ref), "out") for ref in record["kernel_outputs"]]
    return Graph("after fusion", nodes, _existing(nodes, edges))


def _id(ref) -> str:
    kind, what = ref[0], ref[-1]
    return {"param": "p", "op": "o", "kernel": "k"}[kind] + f"_{what}"


def _existing(nodes: list[Node], edges: list) -> list:
    ids = {n.id for n in nodes}
    return list(dict.fromkeys(e for e in edges if e[0] in ids and e[1] in ids))


# --------------------------------------------------------------------------------------------------
# the picture
# --------------------------------------------------------------------------------------------------

class Picture:
    """An SVG drawing: inline in Jupyter, `.save(path)` to keep it (`.svg`; `.dot` when graphviz drew it)."""

    def __init__(self, svg: str, graphs: list[Graph], dot: str | None = None):
        self.svg = svg
        self.graphs = graphs
        self.dot = dot

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path) -> Path:
        path = Path(path)
        if path.suffix == "":
            path = path.with_suffix(".svg")
        if path.suffix == ".svg":
            path.write_text(self.svg)
        elif path.suffix in (".dot", ".gv") and self.dot is not None:
            path.write_text(self.dot)
        else:
            kinds = ".svg" + (" or .dot/.gv" if self.dot is not None else "")
            raise ValueError(f"cannot save the graph as {path.suffix!r}; use {kinds}")
        return path

    def __repr__(self) -> str:
        return f"<babytriton graph: {', '.join(g.title for g in self.graphs)}; .save('f.svg') to keep it>"


def draw(record: dict | None, fmap, source_map, name: str, which: str = "both") -> Picture:
    if which not in WHICH:
        raise ValueError(f"graph(which) is one of {', '.join(map(repr, WHICH))}, got {which!r}")
    if record is None:
        raise ValueError(f"'{name}' has no fusion record to draw (it did not go through the Relax fusion passes)")
    graphs = []
    if which in ("both", "before"):
        graphs.append(before_fusion(record, fmap))
    if which in ("both", "after"):
        graphs.append(after_fusion(record, fmap))
    if graphviz_available():
        return _graphviz_picture(graphs, name)
    return Picture(_svg(graphs, name), graphs)


@functools.lru_cache(maxsize=1)
def graphviz_available() -> bool:
    try:
        import graphviz  # noqa: F401
    except ImportError:
        return False
    return shutil.which("dot") is not None


def _graphviz_picture(graphs: list[Graph], name: str) -> Picture:
    import graphviz
    dot = graphviz.Digraph(name, graph_attr={"rankdir": "TB", "fontname": "monospace", "label": name,
                                             "labelloc": "t"},
                           node_attr={"fontname": "monospace", "fontsize": "11", "shape": "box",
                                      "style": "rounded,filled"})
    for g_index, graph in enumerate(graphs):
        with dot.subgraph(name=f"cluster_{g_index}") as panel:
            panel.attr(label=graph.title, style="dashed", color="#999999")
            boxes = {b: panel.subgraph(name=f"cluster_{g_index}_{b}") for b in graph.boxes}
            for box, context in boxes.items():
                with context as sub:
                    sub.attr(label=graph.boxes[box], style="rounded,filled", fillcolor="#fff4e0",
                             color=STYLE["kernel"][1])
                    for node in graph.nodes:
                        if node.box == box:
                            _gv_node(sub, g_index, node)
            for node in graph.nodes:
                if node.box is None or node.box not in graph.boxes:
                    _gv_node(panel, g_index, node)
            for src, dst in graph.edges:
                panel.edge(f"{g_index}/{src}", f"{g_index}/{dst}")
    return Picture(dot.pipe(format="svg").decode(), graphs, dot.source)


def _gv_node(where, g_index: int, node: Node) -> None:
    fill, line = STYLE[node.kind]
    shape = {"param": "ellipse", "output": "ellipse"}.get(node.kind, "box")
    where.node(f"{g_index}/{node.id}", "\n".join(node.label), shape=shape, fillcolor=fill, color=line)


# --------------------------------------------------------------------------------------------------
# the pure-Python layout and SVG
# --------------------------------------------------------------------------------------------------

@dataclass
class _Placed:
    node: Node
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0


def _layout(graph: Graph) -> tuple[dict[str, _Placed], dict[int, tuple[float, float, float, float]], float, float,
                                   list[list[tuple[float, float]]]]:
    """Rank nodes by longest path from the inputs; give every kernel box its own band of columns
    over the ranks it spans (bands reuse columns where ranks don't overlap); place nodes in them;
    route the edges around the nodes (`_route`)."""
    rank = _ranks(graph)
    placed = {n.id: _Placed(n, w=max(len(s) for s in n.label) * CHAR_W + 2 * PAD,
                            h=len(n.label) * LINE_H + PAD) for n in graph.nodes}
    row_h = max(p.h for p in placed.values()) + RANK_GAP
    groups = sorted(_groups(graph), key=lambda g: min(rank[n.id] for n in g))
    column, spans, columns = _columns(groups, rank)
    inner, left = _column_widths(graph, placed, column, spans, columns)
    for node_id, c in column.items():
        p = placed[node_id]
        p.x = left[c] + BOX_PAD + (inner[c] - p.w) / 2
        p.y = rank[node_id] * row_h + BOX_PAD + LINE_H * 2
    boxes = {}
    for group, col, width in spans:   # a kernel box fills its columns
        box = group[0].box if group[0].box in graph.boxes else None
        if box is not None:
            members = [placed[n.id] for n in group]
            y0 = min(p.y for p in members) - BOX_PAD - LINE_H
            y1 = max(p.y + p.h for p in members) + BOX_PAD
            boxes[box] = (left[col], y0, left[col + width] - COL_GAP - left[col], y1 - y0)
    width = left[-1] - COL_GAP + BOX_PAD
    height = max(p.y + p.h for p in placed.values()) + BOX_PAD
    bands = [r * row_h + BOX_PAD + LINE_H * 2 + row_h - RANK_GAP + BOX_PAD + LANE for r in range(len(rank) + 1)]
    channels = [x - COL_GAP / 2 for x in left]
    return placed, boxes, width, height, _route(graph, placed, rank, bands, channels)


def _ranks(graph: Graph) -> dict[str, int]:
    """Each node's rank: the longest path to it from the inputs; the return below every other node."""
    preds: dict[str, list[str]] = {n.id: [] for n in graph.nodes}
    for src, dst in graph.edges:
        preds[dst].append(src)
    rank: dict[str, int] = {}

    def rank_of(node_id: str) -> int:  # the graph is a DAG in binding order
        if node_id not in rank:
            rank[node_id] = 1 + max((rank_of(p) for p in preds[node_id]), default=-1)
        return rank[node_id]

    for node in graph.nodes:
        rank_of(node.id)
    if "out" in rank:  # the return at the bottom, below ops whose results nothing reads
        rank["out"] = max(rank["out"], 1 + max((r for n, r in rank.items() if n != "out"), default=-1))
    return rank


def _groups(graph: Graph) -> list[list[Node]]:
    """The nodes placed together: a kernel box's nodes, or a single node."""
    groups: list[list[Node]] = []
    by_box: dict[int, list[Node]] = {}
    for node in graph.nodes:
        if node.box is not None and node.box in graph.boxes:
            if node.box not in by_box:
                by_box[node.box] = []
                groups.append(by_box[node.box])
            by_box[node.box].append(node)
        else:
            groups.append([node])
    return groups


def _columns(groups: list[list[Node]], rank: dict[str, int]) -> tuple[dict[str, int], list, int]:
    """Each node's column: every group gets its own columns over the ranks it spans, reusing columns
    where ranks don't overlap. (node id -> column, [(group, first column, width in columns)], columns)."""
    busy: dict[int, list[tuple[int, int]]] = {}   # column -> occupied rank spans
    column: dict[str, int] = {}
    spans: list[tuple[list[Node], int, int]] = []
    for group in groups:
        lo, hi = min(rank[n.id] for n in group), max(rank[n.id] for n in group)
        width = max(sum(1 for n in group if rank[n.id] == r) for r in range(lo, hi + 1))
        col = 0
        while any(not (hi < a or lo > b) for c in range(col, col + width) for a, b in busy.get(c, [])):
            col += 1
        for c in range(col, col + width):
            busy.setdefault(c, []).append((lo, hi))
        slots: dict[int, int] = {}
        for node in group:
            r = rank[node.id]
            column[node.id] = col + slots.get(r, 0)
            slots[r] = slots.get(r, 0) + 1
        spans.append((group, col, width))
    return column, spans, max(busy) + 1 if busy else 1


def _column_widths(graph: Graph, placed: dict[str, _Placed], column: dict[str, int], spans: list,
                   columns: int) -> tuple[list[float], list[float]]:
    """Each column's inner width (as wide as its widest node; a kernel box's columns as wide as its
    title) and left edge, with the right edge of the last."""
    inner = [0.0] * columns
    for node_id, c in column.items():
        inner[c] = max(inner[c], placed[node_id].w)
    for group, col, width in spans:
        box = group[0].box if group[0].box in graph.boxes else None
        if box is not None:
            short = len(graph.boxes[box]) * CHAR_W + 12 - sum(inner[col:col + width]) - 2 * BOX_PAD * (width - 1)
            if short > 0:
                inner[col + width - 1] += short
    left = [COL_GAP]
    for c in range(columns):
        left.append(left[-1] + inner[c] + 2 * BOX_PAD + COL_GAP)
    return inner, left


def _route(graph: Graph, placed: dict[str, _Placed], rank: dict[str, int], bands: list[float],
           channels: list[float]) -> list[list[tuple[float, float]]]:
    """Each edge as a polyline of right angles: down from its source into the band below the source's
    rank; for an edge to the next rank, across and down into the target; for a longer one, across to
    the nearest channel beside the columns, down it to the band above the target, across, and down.
    Bands and channels hold no node, so no edge crosses one; edges sharing a band or a channel get
    lanes LANE apart, and the edges leaving (entering) one node are spread along its side."""
    outs: dict[str, list[int]] = {}
    ins: dict[str, list[int]] = {}
    for i, (src, dst) in enumerate(graph.edges):
        outs.setdefault(src, []).append(i)
        ins.setdefault(dst, []).append(i)

    def along(p: _Placed, edges: list[int], i: int) -> float:
        return p.x + p.w * (edges.index(i) + 1) / (len(edges) + 1)

    used: dict[tuple[str, int], int] = {}

    def lane(kind: str, index: int, width: float) -> float:
        n = used.get((kind, index), 0)
        used[(kind, index)] = n + 1
        lanes = max(int(width // LANE), 1)
        return LANE * (n % lanes)

    band_room = RANK_GAP - 2 * BOX_PAD - LINE_H - 2 * LANE
    routes = []
    for i, (src, dst) in enumerate(graph.edges):
        a, b = placed[src], placed[dst]
        x1, y1 = along(a, outs[src], i), a.y + a.h
        x2, y2 = along(b, ins[dst], i), b.y
        below = bands[rank[src]] + lane("band", rank[src], band_room)
        if rank[dst] == rank[src] + 1:
            routes.append([(x1, y1), (x1, below), (x2, below), (x2, y2)])
            continue
        k = min(range(len(channels)), key=lambda k: abs(channels[k] - x1) + abs(channels[k] - x2))
        xc = channels[k] - COL_GAP / 2 + LANE + lane("channel", k, COL_GAP - 2 * LANE)
        above = bands[rank[dst] - 1] + lane("band", rank[dst] - 1, band_room)
        routes.append([(x1, y1), (x1, below), (xc, below), (xc, above), (x2, above), (x2, y2)])
    return routes


def _svg(graphs: list[Graph], name: str) -> str:
    ET.register_namespace("", SVG_NS)
    layouts = [_layout(g) for g in graphs]
    gap = 30
    # The panels one above the other: side by side, a graph with a long kernel name is too wide for a
    # notebook's column, and the browser shrinks its text to fit.
    total_w = max(layout[2] for layout in layouts) + 20
    total_h = sum(layout[3] for layout in layouts) + gap * (len(layouts) - 1) + LINE_H * 2 + 10
    svg = ET.Element(f"{{{SVG_NS}}}svg", width=f"{total_w:.0f}", height=f"{total_h:.0f}",
                     viewBox=f"0 0 {total_w:.0f} {total_h:.0f}", attrib={"font-family": "monospace",
                                                                          "font-size": "12"})
    ET.SubElement(svg, f"{{{SVG_NS}}}title").text = f"{name}: dataflow before and after fusion"
    defs = ET.SubElement(svg, f"{{{SVG_NS}}}defs")
    marker = ET.SubElement(defs, f"{{{SVG_NS}}}marker", id="arrow", viewBox="0 0 10 10", refX="10", refY="5",
                           markerWidth="7", markerHeight="7", orient="auto-start-reverse")
    ET.SubElement(marker, f"{{{SVG_NS}}}path", d="M 0 0 L 10 5 L 0 10 z", fill="#555555")
    _text(svg, 10, LINE_H + 2, [name], weight="bold")
    y_offset = LINE_H * 2
    for graph, (placed, boxes, width, height, routes) in zip(graphs, layouts):
        panel = ET.SubElement(svg, f"{{{SVG_NS}}}g", transform=f"translate(10,{y_offset:.1f})",
                              attrib={"class": "panel"})
        _text(panel, 0, LINE_H, [graph.title], weight="bold")
        for box, (x, y, w, h) in boxes.items():
            group = ET.SubElement(panel, f"{{{SVG_NS}}}g", attrib={"class": "kernel-box"})
            ET.SubElement(group, f"{{{SVG_NS}}}rect", x=f"{x:.1f}", y=f"{y:.1f}", width=f"{w:.1f}",
                          height=f"{h:.1f}", rx="8", fill=STYLE["kernel"][0], stroke=STYLE["kernel"][1],
                          attrib={"stroke-dasharray": "5,3"})
            _text(group, x + 6, y + LINE_H - 2, [graph.boxes[box]], fill=STYLE["kernel"][1])
        for route in routes:
            d = "M " + " L ".join(f"{x:.1f} {y:.1f}" for x, y in route)
            ET.SubElement(panel, f"{{{SVG_NS}}}path", d=d, fill="none", stroke="#555555",
                          attrib={"marker-end": "url(#arrow)", "class": "edge", "stroke-linejoin": "round"})
        for p in placed.values():
            fill, line = STYLE[p.node.kind]
            group = ET.SubElement(panel, f"{{{SVG_NS}}}g", attrib={"class": f"node {p.node.kind}"})
            ET.SubElement(group, f"{{{SVG_NS}}}title").text = "\n".join(p.node.label)
            ET.SubElement(group, f"{{{SVG_NS}}}rect", x=f"{p.x:.1f}", y=f"{p.y:.1f}", width=f"{p.w:.1f}",
                          height=f"{p.h:.1f}", rx=f"{p.h / 2 if p.node.kind in ('param', 'output') else 4:.1f}",
                          fill=fill, stroke=line)
            _text(group, p.x + PAD, p.y + LINE_H, p.node.label)
        y_offset += height + gap
    return ET.tostring(svg, encoding="unicode")


def _text(parent, x: float, y: float, lines: list[str], weight: str = "normal", fill: str = "#222222"):
    text = ET.SubElement(parent, f"{{{SVG_NS}}}text", x=f"{x:.1f}", y=f"{y:.1f}", fill=fill,
                         attrib={"font-weight": weight})
    for i, line in enumerate(lines):
        span = ET.SubElement(text, f"{{{SVG_NS}}}tspan", x=f"{x:.1f}", dy="0" if i == 0 else str(LINE_H))
        span.text = line
    return text
