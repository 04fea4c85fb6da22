"""PNG drawings of the report figures with matplotlib (``plot`` extra; imported lazily).

The figures reuse the renderer-independent data of :mod:`streammom.report.charts` and the
pixel geometry of :mod:`streammom.report.svg`: an axes spanning the whole figure maps one data
unit to one pixel at ``dpi`` = 100 × ``scale``, so the PNGs look like the SVGs. Only the
object-oriented API and the Agg canvas are used (no pyplot, no global state), so this is safe
in a daemon thread.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from streammom.report.charts import (
    LINE_HEIGHT,
    R_MAX,
    FrequencyTable,
    HeatmapData,
    TreeLayout,
    fmt_share,
    truncate,
)
from streammom.report.svg import (
    FREQ_BAR_W,
    FREQ_CELL_W,
    FREQ_HEAD_H,
    FREQ_LABEL_W,
    FREQ_ROW_H,
    HEAT_COL_W,
    HEAT_LEFT,
    HEAT_TOP,
    MUTED,
    TEXT,
    _cell_opacity,
    _pct,
    _value_text,
    heat_size,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["frequency_png", "heatmap_png", "tree_png"]

_PX_PT = 72.0 / 100.0  # points per pixel at 100 dpi
_MAX_INCHES = 320.0  # matplotlib refuses figures above 2^16 pixels a side
TITLE_H = 28.0  # the title band above every PNG figure


def require_matplotlib() -> None:
    """Raise a one-line ``RuntimeError`` naming the extra to install when matplotlib is missing
    (called before anything is written)."""
    try:
        import matplotlib.figure
        import matplotlib.patches  # noqa: F401
    except ImportError as exc:
        raise RuntimeError("PNG export needs matplotlib: pip install 'streammom[plot]'") from exc


def _canvas(width: float, height: float, title: str) -> tuple[Figure, Axes]:
    """A white canvas of ``width`` × ``height`` drawing units below a ``TITLE_H`` title band
    (a PNG is seen without the page around it, so it names what it shows)."""
    require_matplotlib()
    from matplotlib.figure import Figure

    total = height + TITLE_H
    fig = Figure(
        figsize=(min(width / 100.0, _MAX_INCHES), min(total / 100.0, _MAX_INCHES)), dpi=100
    )
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, width)
    ax.set_ylim(height, -TITLE_H)
    ax.set_axis_off()
    fig.patch.set_facecolor("#ffffff")
    _text(ax, 8, -TITLE_H / 2 + 5, title, 13.0, fontweight="bold")
    return fig, ax


def _save(fig: Figure, path: str | os.PathLike[str], scale: float) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=100 * scale, facecolor="#ffffff", metadata={"Software": None})
    return target


def _text(ax: Axes, x: float, y: float, s: str, size_px: float = 11.0, **kw: Any) -> None:
    kw.setdefault("color", TEXT)
    ax.text(x, y, s, fontsize=size_px * _PX_PT, va="baseline", **kw)


def tree_png(layout: TreeLayout, path: str | os.PathLike[str], *, scale: float = 1.0) -> Path:
    """Draw the cluster tree to ``path`` (the geometry of :func:`.svg.tree_svg`)."""
    from matplotlib.patches import Circle

    fig, ax = _canvas(layout.width, layout.height,
                      f"Cluster tree: {len(layout.leaf_order)} leaves (area = weight)")
    by_id = {b.node_id: b for b in layout.nodes}
    for child in layout.nodes:
        parent = by_id.get(child.parent)
        if parent is None:
            continue
        y0, y1 = parent.label_bottom + 4.0, child.y - child.r
        ym = (y0 + child.y + child.r - 2 * R_MAX) / 2.0  # same for both children
        width_px = max(1.0, 16.0 * child.share)
        ax.plot(
            [parent.x, parent.x, child.x, child.x],
            [y0, ym, ym, y1],
            color="#c3c9d0",
            linewidth=width_px * _PX_PT,
            solid_joinstyle="round",
            zorder=1,
        )
    for box in layout.nodes:
        ax.add_patch(
            Circle(
                (box.x, box.y),
                box.r,
                facecolor=box.colour,
                alpha=0.9 if box.is_leaf else 0.55,
                edgecolor="#ffffff",
                linewidth=1.5 * _PX_PT,
                zorder=2,
            )
        )
        y = box.label_top + LINE_HEIGHT - 3.0
        _text(ax, box.x, y, box.title, 12.0, ha="center", fontweight="bold")
        y += LINE_HEIGHT
        _text(ax, box.x, y, box.size_line, ha="center", color=MUTED)
        for feat, p in zip(box.drawn_features, box.probabilities, strict=False):
            y += LINE_HEIGHT
            _text(ax, box.x, y, f"{truncate(feat.text, 25)} {_pct(p)}", ha="center")
    return _save(fig, path, scale)


def frequency_png(
    table: FrequencyTable, path: str | os.PathLike[str], *, scale: float = 1.0
) -> Path:
    """Draw the feature-frequency chart (features × [all, leaves…] bars) to ``path``."""
    from matplotlib.patches import Rectangle

    n_cols = 1 + len(table.leaf_order)
    width = FREQ_LABEL_W + n_cols * FREQ_CELL_W + 12.0
    height = FREQ_HEAD_H + max(len(table.features), 1) * FREQ_ROW_H + 10.0
    title = f"Frequency of the {len(table.features)} most frequent features, overall and per leaf"
    fig, ax = _canvas(width, height, title)
    heads = [("all", "#3b4450", "100%")] + [
        (table.names.get(nid, f"#{nid}"), table.colours[nid], fmt_share(s))
        for nid, s in zip(table.leaf_order, table.leaf_shares, strict=True)
    ]
    for j, (name, colour, share) in enumerate(heads):
        x = FREQ_LABEL_W + j * FREQ_CELL_W
        ax.add_patch(Rectangle((x + 4, 8), FREQ_CELL_W - 8, 6, facecolor=colour, linewidth=0))
        _text(ax, x + FREQ_CELL_W / 2, 29, name, ha="center", fontweight="bold")
        _text(ax, x + FREQ_CELL_W / 2, 43, share, ha="center", color=MUTED)
    for i, feat in enumerate(table.features):
        y = FREQ_HEAD_H + i * FREQ_ROW_H
        if i % 2 == 0:
            ax.add_patch(Rectangle((0, y), width, FREQ_ROW_H, facecolor="#f6f8fa", linewidth=0))
        _text(ax, 8, y + 14, truncate(feat.text, 42))
        for j, (_, colour, _) in enumerate(heads):
            v = float(table.values[i, j])
            x = FREQ_LABEL_W + j * FREQ_CELL_W + 4
            bar = FREQ_BAR_W * min(max(v / table.vmax, 0.0), 1.0)
            ax.add_patch(
                Rectangle((x, y + 3), FREQ_BAR_W, FREQ_ROW_H - 6, facecolor="#e7eaee", lw=0)
            )
            ax.add_patch(
                Rectangle((x, y + 3), bar, FREQ_ROW_H - 6, facecolor=colour, alpha=0.85, lw=0)
            )
            _text(ax, x + FREQ_CELL_W - 10, y + 14, _value_text(v, table.percent), 10.0, ha="right")
    return _save(fig, path, scale)


def _rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i : i + 2], 16) / 255.0 for i in (1, 3, 5)])


def heatmap_png(data: HeatmapData, path: str | os.PathLike[str], *, scale: float = 1.0) -> Path:
    """Draw the event heatmap (rows by leaf, tinted; dark cells = feature present) to ``path``."""
    from matplotlib.patches import Rectangle

    width, height, rh = heat_size(data)
    fig, ax = _canvas(width, height,
                      f"{data.n_rows} sampled events by leaf × the most frequent features")
    n_feat = len(data.features)
    if data.n_rows and n_feat:
        # One image: white, leaf tint per row, dark cells; each column HEAT_COL_W px wide with a
        # 1 px gap either side, as in the SVG.
        sub = int(HEAT_COL_W)
        img = np.ones((data.n_rows, n_feat * sub, 3))
        for r, leaf in enumerate(data.row_leaf):
            tint = _rgb(data.colours.get(leaf, "#999999"))
            img[r] = 1.0 - 0.16 * (1.0 - tint)
        dark = _rgb("#1b1f24")
        for r, c, v in data.cells:
            op = _cell_opacity(v, data.vmax)
            seg = slice(c * sub + 1, (c + 1) * sub - 1)
            img[r, seg] = (1 - op) * img[r, seg] + op * dark
        ax.imshow(
            img,
            extent=(
                HEAT_LEFT,
                HEAT_LEFT + n_feat * HEAT_COL_W,
                HEAT_TOP + data.n_rows * rh,
                HEAT_TOP,
            ),
            interpolation="nearest",
            aspect="auto",
            zorder=1,
        )
    for leaf, first, count in data.bands:
        y, h = HEAT_TOP + first * rh, count * rh
        ax.add_patch(
            Rectangle((HEAT_LEFT - 14, y), 10, h, facecolor=data.colours.get(leaf, "#999999"), lw=0)
        )
        if h >= 11:
            name = data.names.get(leaf, f"#{leaf}")
            _text(ax, HEAT_LEFT - 20, y + min(h / 2, 12) + 4, f"{name} ({count})", ha="right")
    for j, feat in enumerate(data.features):
        x = HEAT_LEFT + (j + 0.5) * HEAT_COL_W
        ax.text(
            x,
            HEAT_TOP - 6,
            truncate(feat.text, 24),
            fontsize=10 * _PX_PT,
            rotation=60,
            rotation_mode="anchor",
            ha="left",
            va="baseline",
            color=TEXT,
        )
    _text(ax, HEAT_LEFT, height - 8, data.note, color=MUTED)
    return _save(fig, path, scale)
