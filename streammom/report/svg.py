"""SVG drawings of the report figures (tree, frequency chart, heatmap).

Each function returns one ``<svg>`` element as text. ``standalone=False`` (the default) is for
inlining into HTML and carries no namespace URL at all; ``standalone=True`` adds the XML
declaration and the SVG namespace so the file opens on its own (slides, e-mail). Styling is done
with presentation attributes only, so both forms look the same. Output is deterministic: numbers
are printed with fixed precision and elements in a fixed order.
"""

from __future__ import annotations

import math
from html import escape

from streammom.report.charts import (
    LINE_HEIGHT,
    R_MAX,
    FrequencyTable,
    HeatmapData,
    NodeBox,
    TreeLayout,
    fmt_share,
    fmt_weight,
    truncate,
)

__all__ = ["frequency_svg", "heatmap_svg", "tree_svg"]

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', Helvetica, Arial, sans-serif"
TEXT = "#1f2328"
MUTED = "#59636e"
SVG_NS = "http://www.w3.org/2000/svg"


def _n(x: float) -> str:
    """A coordinate with at most 2 decimals and no trailing zeros.

    >>> _n(3.0), _n(2.456), _n(-0.001)
    ('3', '2.46', '0')
    """
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text in {"-0", ""} else text


def _a(value: object) -> str:
    return escape(str(value), quote=True)


def _open_svg(width: float, height: float, label: str, cls: str, standalone: bool) -> str:
    ns = f' xmlns="{SVG_NS}"' if standalone else ""
    head = '<?xml version="1.0" encoding="UTF-8"?>\n' if standalone else ""
    # Inline in HTML: shrink to the page width down to 72 % of the natural size, then scroll.
    fit = (
        ""
        if standalone
        else f' style="width:100%;max-width:{_n(width)}px;min-width:{_n(0.72 * width)}px;'
        'height:auto;display:block;margin:0 auto"'
    )
    return (
        f'{head}<svg{ns} class="{cls}" width="{_n(width)}" height="{_n(height)}"{fit} '
        f'viewBox="0 0 {_n(width)} {_n(height)}" role="img" aria-label="{_a(label)}" '
        f'font-family="{_a(FONT)}" font-size="11" fill="{TEXT}">'
        f'<title>{escape(label)}</title><rect class="bg" x="0" y="0" width="{_n(width)}" '
        f'height="{_n(height)}" fill="#ffffff"/>'
    )


def _pct(p: float) -> str:
    pct = 100.0 * p
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.1f}%"


# --------------------------------------------------------------------------------- tree
def _node_tooltip(box: NodeBox, layout: TreeLayout) -> str:
    lines = [
        (f"leaf {box.name} (node {box.node_id})" if box.is_leaf else f"node {box.node_id}"),
        f"weight {fmt_weight(box.weight)}, {fmt_share(box.share)} of all",
        f"most relevant features (λ = {layout.lam:g}):",
    ]
    lines += [
        f"  {f.text} — {_pct(p)}" for f, p in zip(box.features, box.probabilities, strict=True)
    ]
    return "\n".join(lines)


def _edge(parent: NodeBox, child: NodeBox) -> str:
    y0 = parent.label_bottom + 4.0
    y1 = child.y - child.r
    ym = (y0 + child.y + child.r - 2 * R_MAX) / 2.0  # same for both children
    width = max(1.0, 16.0 * child.share)
    return (
        f'<path class="edge" data-parent="{parent.node_id}" data-child="{child.node_id}" '
        f'd="M{_n(parent.x)} {_n(y0)}V{_n(ym)}H{_n(child.x)}V{_n(y1)}" fill="none" '
        f'stroke="#c3c9d0" stroke-width="{_n(width)}" stroke-linejoin="round"/>'
    )


def _node(box: NodeBox, layout: TreeLayout) -> str:
    kind = "leaf" if box.is_leaf else "internal"
    parts = [
        f'<g class="node {kind}" data-node-id="{box.node_id}" data-parent="{box.parent}" '
        f'data-weight="{_n(box.weight)}">',
        f"<title>{escape(_node_tooltip(box, layout))}</title>",
        f'<circle cx="{_n(box.x)}" cy="{_n(box.y)}" r="{_n(box.r)}" fill="{box.colour}" '
        f'fill-opacity="{"0.9" if box.is_leaf else "0.55"}" stroke="#ffffff" stroke-width="1.5"/>',
    ]
    y = box.label_top + LINE_HEIGHT - 3.0
    parts.append(
        f'<text class="node-title" x="{_n(box.x)}" y="{_n(y)}" text-anchor="middle" '
        f'font-weight="700" font-size="12">{escape(box.title)}</text>'
    )
    y += LINE_HEIGHT
    parts.append(
        f'<text class="node-size" x="{_n(box.x)}" y="{_n(y)}" text-anchor="middle" '
        f'fill="{MUTED}">{escape(box.size_line)}</text>'
    )
    for feat, p in zip(box.drawn_features, box.probabilities, strict=False):
        y += LINE_HEIGHT
        parts.append(
            f'<text class="feature" data-feature="{_a(feat.code)}" data-index="{feat.index}" '
            f'x="{_n(box.x)}" y="{_n(y)}" text-anchor="middle">'
            f"{escape(truncate(feat.text, 25))} "
            f'<tspan fill="{MUTED}">{_pct(p)}</tspan></text>'
        )
    parts.append("</g>")
    return "".join(parts)


def tree_svg(layout: TreeLayout, *, standalone: bool = False) -> str:
    """The cluster tree: one ``<g class="node" data-node-id=…>`` per node, edges underneath.

    Node areas are proportional to weights; edge widths to the child's share of all events.
    """
    by_id = {b.node_id: b for b in layout.nodes}
    out = [_open_svg(layout.width, layout.height, "Cluster tree", "tree", standalone)]
    out.append('<g class="edges">')
    out += [_edge(by_id[b.parent], b) for b in layout.nodes if b.parent in by_id]
    out.append('</g><g class="nodes">')
    out += [_node(b, layout) for b in layout.nodes]
    out.append("</g></svg>")
    return "".join(out)


# ------------------------------------------------------------------------ frequency chart
FREQ_LABEL_W = 260.0
FREQ_HEAD_H = 50.0
FREQ_ROW_H = 20.0
FREQ_CELL_W = 76.0
FREQ_VALUE_W = 32.0  # the value is written right of its bar, never over it
FREQ_BAR_W = FREQ_CELL_W - 8.0 - FREQ_VALUE_W


def _value_text(v: float, percent: bool) -> str:
    if percent:
        return _pct(v)
    return f"{v:.3g}"


def frequency_svg(table: FrequencyTable, *, standalone: bool = False) -> str:
    """The disease-frequency chart: top features (rows) × [all, leaves…] (columns) as bars."""
    n_cols = 1 + len(table.leaf_order)
    width = FREQ_LABEL_W + n_cols * FREQ_CELL_W + 12.0
    height = FREQ_HEAD_H + max(len(table.features), 1) * FREQ_ROW_H + 10.0
    title = f"Frequency of the {len(table.features)} most frequent features, overall and per leaf"
    out = [_open_svg(width, height, title, "frequency", standalone)]
    heads = [("all", "#3b4450", "100%")] + [
        (table.names.get(nid, f"#{nid}"), table.colours[nid], fmt_share(s))
        for nid, s in zip(table.leaf_order, table.leaf_shares, strict=True)
    ]
    for j, (name, colour, share) in enumerate(heads):
        x = FREQ_LABEL_W + j * FREQ_CELL_W
        out.append(
            f'<g class="freq-head" data-column="{_a(name)}">'
            f'<rect x="{_n(x + 4)}" y="8" width="{_n(FREQ_CELL_W - 8)}" height="6" rx="2" '
            f'fill="{colour}"/>'
            f'<text x="{_n(x + FREQ_CELL_W / 2)}" y="29" text-anchor="middle" '
            f'font-weight="700">{escape(name)}</text>'
            f'<text x="{_n(x + FREQ_CELL_W / 2)}" y="43" text-anchor="middle" '
            f'fill="{MUTED}">{escape(share)}</text></g>'
        )
    for i, feat in enumerate(table.features):
        y = FREQ_HEAD_H + i * FREQ_ROW_H
        stripe = "#f6f8fa" if i % 2 == 0 else "#ffffff"
        out.append(
            f'<g class="freq-row" data-feature="{_a(feat.code)}">'
            f"<title>{escape(feat.text)}</title>"
            f'<rect x="0" y="{_n(y)}" width="{_n(width)}" height="{_n(FREQ_ROW_H)}" '
            f'fill="{stripe}"/>'
            f'<text x="8" y="{_n(y + 14)}">{escape(truncate(feat.text, 42))}</text>'
        )
        for j, (_, colour, _) in enumerate(heads):
            v = float(table.values[i, j])
            x = FREQ_LABEL_W + j * FREQ_CELL_W + 4
            bar = FREQ_BAR_W * min(max(v / table.vmax, 0.0), 1.0)
            out.append(
                f'<rect x="{_n(x)}" y="{_n(y + 3)}" width="{_n(FREQ_BAR_W)}" '
                f'height="{_n(FREQ_ROW_H - 6)}" fill="#e7eaee" rx="2"/>'
                f'<rect class="bar" x="{_n(x)}" y="{_n(y + 3)}" width="{_n(bar)}" '
                f'height="{_n(FREQ_ROW_H - 6)}" fill="{colour}" fill-opacity="0.85" rx="2"/>'
                f'<text x="{_n(x + FREQ_CELL_W - 10)}" y="{_n(y + 14)}" text-anchor="end" '
                f'font-size="10">{escape(_value_text(v, table.percent))}</text>'
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


# -------------------------------------------------------------------------------- heatmap
HEAT_LEFT = 96.0
HEAT_TOP = 150.0
HEAT_COL_W = 15.0
HEAT_TARGET_H = 560.0


def heat_row_height(n_rows: int) -> float:
    """Row height so the heatmap is about 560 px tall (between 1 and 8 px per row)."""
    return min(8.0, max(1.0, HEAT_TARGET_H / max(n_rows, 1)))


def heat_size(data: HeatmapData) -> tuple[float, float, float]:
    """``(width, height, row height)`` of the heatmap canvas (room for the slanted labels)."""
    rh = heat_row_height(data.n_rows)
    width = HEAT_LEFT + max(len(data.features), 1) * HEAT_COL_W + 110.0
    height = HEAT_TOP + max(data.n_rows, 1) * rh + 24.0
    return width, height, rh


def _cell_opacity(v: float, vmax: float) -> float:
    if vmax <= 1.0:
        return 1.0
    return 0.35 + 0.65 * math.log1p(v) / math.log1p(vmax)


def heatmap_svg(data: HeatmapData, *, standalone: bool = False) -> str:
    """Sampled events (rows, grouped and tinted by leaf) × most frequent features (columns)."""
    width, height, rh = heat_size(data)
    title = f"Heatmap of {data.n_rows} sampled events by leaf over the most frequent features"
    out = [_open_svg(width, height, title, "heatmap", standalone)]
    grid_w = len(data.features) * HEAT_COL_W
    for j, feat in enumerate(data.features):
        x = HEAT_LEFT + (j + 0.5) * HEAT_COL_W
        out.append(
            f'<text class="heat-col" data-feature="{_a(feat.code)}" x="{_n(x)}" '
            f'y="{_n(HEAT_TOP - 6)}" font-size="10" '
            f'transform="rotate(-60 {_n(x)} {_n(HEAT_TOP - 6)})">'
            f"<title>{escape(feat.text)}</title>{escape(truncate(feat.text, 24))}</text>"
        )
    for leaf, first, count in data.bands:
        y = HEAT_TOP + first * rh
        h = count * rh
        colour = data.colours.get(leaf, "#999999")
        out.append(
            f'<g class="heat-band" data-leaf="{leaf}" data-rows="{count}">'
            f'<rect x="{_n(HEAT_LEFT)}" y="{_n(y)}" width="{_n(grid_w)}" height="{_n(h)}" '
            f'fill="{colour}" fill-opacity="0.16"/>'
            f'<rect x="{_n(HEAT_LEFT - 14)}" y="{_n(y)}" width="10" height="{_n(h)}" '
            f'fill="{colour}"/>'
        )
        if h >= 11:
            out.append(
                f'<text x="{_n(HEAT_LEFT - 20)}" y="{_n(y + min(h / 2, 12) + 4)}" '
                f'text-anchor="end">{escape(data.names.get(leaf, f"#{leaf}"))} ({count})</text>'
            )
        out.append("</g>")
    out.append('<g class="heat-cells" fill="#1b1f24">')
    for r, c, v in data.cells:
        op = _cell_opacity(v, data.vmax)
        opacity = "" if op >= 1.0 else f' fill-opacity="{op:.2f}"'
        out.append(
            f'<rect x="{_n(HEAT_LEFT + c * HEAT_COL_W + 1)}" y="{_n(HEAT_TOP + r * rh)}" '
            f'width="{_n(HEAT_COL_W - 2)}" height="{_n(rh)}"{opacity}/>'
        )
    out.append("</g>")
    out.append(
        f'<text x="{_n(HEAT_LEFT)}" y="{_n(height - 8)}" fill="{MUTED}">'
        f"{escape(data.note)}</text></svg>"
    )
    return "".join(out)
