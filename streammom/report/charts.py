"""Renderer-independent figure data: tree layout, frequency table and event heatmap.

Every figure of a report is computed here once, as plain numbers and strings, and drawn by
:mod:`streammom.report.svg` (HTML, SVG files) and :mod:`streammom.report.png` (matplotlib).

* :func:`tree_layout` — a top-down layout of the cluster tree: leaves on equally spaced slots
  left to right (children in stored order), parents centred over their children; node *area*
  proportional to weight; each node labelled with its id, weight, share and its most relevant
  features (Sievert–Shirley relevance, λ = 0.7; thesis digest §5.6).
* :func:`frequency_table` — the "disease-frequency chart" of the MLHC paper (§5.2): the 20 most
  frequent features overall (root mean) and their frequency inside each leaf.
* :func:`sample_events` / :func:`heatmap_data` — the paper's heatmap: a seeded sample of events,
  routed with the model and ordered by leaf, over the 40 most frequent features.
"""

from __future__ import annotations

import colorsys
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from streammom.model import HierarchyModel
from streammom.report.codes import CodeMap

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = [
    "PALETTE",
    "EventSample",
    "FeatureLabel",
    "FrequencyTable",
    "HeatmapData",
    "NodeBox",
    "SampleItem",
    "TreeLayout",
    "feature_label",
    "frequency_table",
    "heatmap_data",
    "leaf_colours",
    "preorder",
    "sample_events",
    "tree_layout",
]

#: Leaf colours (Okabe–Ito, then Tableau-like extras); more leaves get generated colours
#: (:func:`leaf_colours`), never a repeat.
PALETTE: tuple[str, ...] = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#7F3C8D",
    "#8C564B",
    "#3969AC",
    "#E73F74",
    "#80BA5A",
)
INTERNAL_COLOUR = "#9aa3ad"

# Tree geometry (pixels).
SLOT_WIDTH = 200.0
#: Above this many leaves the tree is drawn compact so it fits ``FIT_WIDTH`` (a laptop page):
#: narrower slots, leaves numbered L1… with their share, features in tooltips and the table.
COMPACT_LEAVES = 8
FIT_WIDTH = 1320.0
MIN_SLOT_WIDTH = 38.0
MARGIN = 24.0
R_MAX = 34.0
R_MIN = 3.0
LINE_HEIGHT = 14.0
LABEL_CHARS = 30


@dataclass(frozen=True)
class FeatureLabel:
    """A feature as shown: its code (the model's feature name), optional name, and index."""

    index: int
    code: str
    name: str | None

    @property
    def text(self) -> str:
        """``code name`` (or just the code)."""
        return f"{self.code} {self.name}" if self.name else self.code


def feature_label(model: HierarchyModel, index: int, codes: CodeMap | None) -> FeatureLabel:
    """The label of feature ``index``: the model's feature name, plus its name from ``codes``."""
    code = model.feature_names[index] if model.feature_names is not None else f"f{index}"
    name = codes.name(code) if codes is not None else None
    return FeatureLabel(index=int(index), code=str(code), name=name)


def truncate(text: str, limit: int = LABEL_CHARS) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis.

    >>> truncate("Heart failure, unspecified", 10)
    'Heart fai…'
    """
    return text if len(text) <= limit else text[: max(limit - 1, 1)].rstrip() + "…"


def fmt_weight(w: float) -> str:
    """A weight for people: integers with thousands separators, else 3 significant digits.

    >>> fmt_weight(12345.0), fmt_weight(12.5), fmt_weight(0.25)
    ('12,345', '12.5', '0.25')
    """
    if w >= 100 or float(w).is_integer():
        return f"{round(w):,}"
    return f"{w:.3g}"


def fmt_share(s: float) -> str:
    """A share in percent.

    >>> fmt_share(0.4123), fmt_share(0.0004)
    ('41.2%', '0.04%')
    """
    pct = 100.0 * s
    return f"{pct:.1f}%" if pct >= 1 or pct == 0 else f"{pct:.2g}%"


@lru_cache(maxsize=1)
def _extended_palette() -> tuple[str, ...]:
    """:data:`PALETTE` then 52 more colours, each the candidate farthest (RGB L1) from all
    chosen so far among 30 hues × 3 lightnesses × 2 saturations (deterministic)."""
    def rgb(colour: str) -> tuple[int, ...]:
        return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))

    candidates = []
    for h in range(30):
        for light in (0.35, 0.5, 0.68):
            for sat in (0.55, 0.85):
                r, g, b = colorsys.hls_to_rgb(h / 30.0, light, sat)
                candidates.append(f"#{round(r * 255):02X}{round(g * 255):02X}{round(b * 255):02X}")
    chosen = list(PALETTE)
    pts = np.array([rgb(c) for c in candidates], dtype=float)
    gap = np.min(np.abs(pts[:, None, :] - np.array([rgb(c) for c in chosen])[None]).sum(2),
                 axis=1)
    while len(chosen) < len(PALETTE) + 52:
        k = int(np.argmax(gap))
        chosen.append(candidates[k])
        gap = np.minimum(gap, np.abs(pts - pts[k]).sum(axis=1))
    return tuple(chosen)


def distinct_colour(i: int) -> str:
    """The i-th leaf colour: :data:`PALETTE`, then colours chosen to be as far as possible
    from all before them (64 in all), then hues 137.5° apart; never a repeat in a report.

    >>> distinct_colour(0), len({distinct_colour(i) for i in range(64)})
    ('#0072B2', 64)
    """
    extended = _extended_palette()
    if i < len(extended):
        return extended[i]
    k = i - len(extended)
    r, g, b = colorsys.hls_to_rgb((k * 137.508 + 20.0) % 360.0 / 360.0, (0.42, 0.58)[k % 2], 0.62)
    return f"#{round(r * 255):02X}{round(g * 255):02X}{round(b * 255):02X}"


def leaf_colours(leaf_order: Sequence[int]) -> dict[int, str]:
    """Colour of each leaf id, by position in ``leaf_order`` (all distinct)."""
    return {nid: distinct_colour(i) for i, nid in enumerate(leaf_order)}


# ------------------------------------------------------------------------------- tree layout
@dataclass(frozen=True)
class NodeBox:
    """One laid-out node: centre (x, y), radius, colour and label lines."""

    node_id: int
    parent: int
    depth: int
    is_leaf: bool
    weight: float
    share: float
    x: float
    y: float
    r: float
    colour: str
    features: tuple[FeatureLabel, ...]
    probabilities: tuple[float, ...]
    leaf_number: int | None = None  # 1… left to right (leaves only)
    compact: bool = False  # drawn without feature lines (many leaves)

    @property
    def name(self) -> str:
        """``L3`` for the third leaf from the left, ``#12`` (the node id) for internal nodes."""
        return f"L{self.leaf_number}" if self.leaf_number is not None else f"#{self.node_id}"

    @property
    def title(self) -> str:
        """The node's heading line: ``L3 · #12`` (leaf number, node id) or ``#12``."""
        if self.leaf_number is None or self.compact:
            return self.name
        return f"{self.name} · #{self.node_id}"

    @property
    def size_line(self) -> str:
        if self.compact:
            return fmt_share(self.share)
        return f"w {fmt_weight(self.weight)} ({fmt_share(self.share)})"

    @property
    def drawn_features(self) -> tuple[FeatureLabel, ...]:
        """The feature lines under the node (none in a compact tree: tooltips and the leaf
        table carry them)."""
        return () if self.compact else self.features

    @property
    def label_top(self) -> float:
        """y of the top of the label block: circles of a level sit on a common baseline."""
        return self.y + self.r + 6.0

    @property
    def label_bottom(self) -> float:
        """y of the bottom of the label block (edges to the children start below it)."""
        return self.label_top + LINE_HEIGHT * (2 + len(self.drawn_features))


@dataclass(frozen=True)
class TreeLayout:
    """The laid-out tree: nodes in pre-order (root first), leaves left to right, canvas size."""

    nodes: tuple[NodeBox, ...]
    leaf_order: tuple[int, ...]
    width: float
    height: float
    family: str
    lam: float

    def node(self, node_id: int) -> NodeBox:
        for box in self.nodes:
            if box.node_id == node_id:
                return box
        raise KeyError(node_id)

    @property
    def compact(self) -> bool:
        """Drawn compact (above ``COMPACT_LEAVES`` leaves): features in tooltips, not lines."""
        return bool(self.nodes) and self.nodes[0].compact

    @property
    def colours(self) -> dict[int, str]:
        return {b.node_id: b.colour for b in self.nodes}

    @property
    def names(self) -> dict[int, str]:
        """Leaf id → its display name (``L1`` … left to right)."""
        return {b.node_id: b.name for b in self.nodes if b.is_leaf}


def preorder(model: HierarchyModel) -> list[int]:
    """Node ids in pre-order (root first, children in stored order)."""
    out: list[int] = []
    stack = [model.root_id]
    while stack:
        nid = stack.pop()
        out.append(nid)
        stack.extend(reversed(model.nodes[nid].children))
    return out


def tree_layout(
    model: HierarchyModel,
    *,
    codes: CodeMap | None = None,
    n_features: int = 4,
    lam: float = 0.7,
) -> TreeLayout:
    """Lay the tree out top-down; label every node with its ``n_features`` most relevant features.

    Radius r = R_MAX·sqrt(weight / root weight), so areas are proportional to weights (a
    minimum radius of R_MIN keeps tiny nodes visible).
    """
    order = preorder(model)
    leaves = [nid for nid in order if model.nodes[nid].is_leaf]
    colours = leaf_colours(leaves)
    slot = {nid: i for i, nid in enumerate(leaves)}
    compact = len(leaves) > COMPACT_LEAVES
    slot_w = (max(MIN_SLOT_WIDTH, min(SLOT_WIDTH, (FIT_WIDTH - 2 * MARGIN) / len(leaves)))
              if compact else SLOT_WIDTH)
    level_h = 2 * R_MAX + 6.0 + LINE_HEIGHT * (2 + (0 if compact else n_features)) + (
        20.0 if compact else 34.0)
    total = max(float(model.root.weight), 1e-300)
    xs: dict[int, float] = {}
    for nid in reversed(order):  # children before parents
        node = model.nodes[nid]
        if node.is_leaf:
            xs[nid] = MARGIN + slot_w * (slot[nid] + 0.5)
        else:
            xs[nid] = float(np.mean([xs[c] for c in node.children]))
    boxes = []
    for nid in order:
        node = model.nodes[nid]
        share = max(float(node.weight), 0.0) / total
        feats = model.top_features(nid, n=n_features, lam=lam)
        radius = max(R_MAX * math.sqrt(min(share, 1.0)), R_MIN)
        boxes.append(
            NodeBox(
                node_id=nid,
                parent=node.parent,
                depth=node.depth,
                is_leaf=node.is_leaf,
                weight=float(node.weight),
                share=share,
                x=xs[nid],
                y=MARGIN + 2 * R_MAX + node.depth * level_h - radius,
                r=radius,
                colour=colours.get(nid, INTERNAL_COLOUR),
                features=tuple(feature_label(model, f.index, codes) for f in feats),
                probabilities=tuple(float(f.probability) for f in feats),
                leaf_number=slot[nid] + 1 if nid in slot else None,
                compact=compact,
            )
        )
    depth = max(n.depth for n in model.nodes.values())
    return TreeLayout(
        nodes=tuple(boxes),
        leaf_order=tuple(leaves),
        width=2 * MARGIN + slot_w * len(leaves),
        height=MARGIN + (depth + 1) * level_h,
        family=model.family,
        lam=lam,
    )


# --------------------------------------------------------------------------- frequency table
@dataclass(frozen=True)
class FrequencyTable:
    """Frequencies of the top features overall (rows) in every leaf (columns).

    ``values[i, 0]`` is feature i's overall frequency (root mean), ``values[i, 1 + j]`` its
    frequency in ``leaf_order[j]``. ``vmax`` is the bar scale (1 for Bernoulli prevalences).
    """

    features: tuple[FeatureLabel, ...]
    leaf_order: tuple[int, ...]
    leaf_shares: tuple[float, ...]
    colours: dict[int, str]
    values: np.ndarray
    vmax: float
    percent: bool
    names: dict[int, str] = field(default_factory=dict)  # leaf id → "L3"


def frequency_table(
    model: HierarchyModel,
    layout: TreeLayout,
    *,
    codes: CodeMap | None = None,
    n_top: int = 20,
) -> FrequencyTable:
    """The ``n_top`` most frequent features overall and their frequency in each leaf.

    Ties break by feature index, so the table is deterministic.
    """
    root = np.asarray(model.root.mean, dtype=float)
    order = np.lexsort((np.arange(root.size), -root))[: min(n_top, root.size)]
    order = order[root[order] > 0]
    leaves = layout.leaf_order
    cols = [root] + [np.asarray(model.nodes[nid].mean, dtype=float) for nid in leaves]
    values = (
        np.column_stack([c[order] for c in cols]) if order.size else np.zeros((0, 1 + len(leaves)))
    )
    percent = model.family == "bernoulli"
    vmax = 1.0 if percent else float(values.max()) if values.size and values.max() > 0 else 1.0
    return FrequencyTable(
        features=tuple(feature_label(model, int(i), codes) for i in order),
        leaf_order=leaves,
        leaf_shares=tuple(layout.node(nid).share for nid in leaves),
        colours={nid: layout.node(nid).colour for nid in leaves},
        values=values,
        vmax=vmax,
        percent=percent,
        names=layout.names,
    )


# ----------------------------------------------------------------------------------- events
@dataclass
class EventSample:
    """A seeded sample of events as model rows (CSR, n × d) with read statistics."""

    X: sp.csr_array
    ids: list[str]
    n_read: int = 0
    n_invalid: int = 0
    n_unknown_only: int = 0
    n_unknown_features: int = 0
    source: str = ""
    notes: list[str] = field(default_factory=list)


#: One input event for the heatmap sample: (event id, its features — a code / token list or a
#: token → count map), or ``None`` for an event that could not be read (counted as invalid).
SampleItem = tuple[str, Sequence[str] | Mapping[str, float]] | None


def sample_events(
    items: Iterable[SampleItem],
    model: HierarchyModel,
    *,
    sample: int = 400,
    seed: int = 0,
    source: str = "",
) -> EventSample:
    """Keep a seeded sample of events as model rows, with read statistics.

    ``items`` are decoded events — the daemon decodes its own input format and passes them
    here (``streammom report --events``), a library user passes ``(id, codes)`` pairs.
    Features are mapped through the model's ``feature_names``; unknown features are dropped,
    and events with no known feature are skipped. Bernoulli models see 0/1 rows, multinomial
    models counts (a list counts repeated tokens). The sample is a reservoir sample
    (Algorithm R, ``random.Random(seed)``) kept in input order.
    """
    if model.feature_names is None:
        raise ValueError("the model has no feature names, so events cannot be mapped to features")
    import scipy.sparse as sp  # the report's event sample only: inspect never loads scipy

    index = {name: i for i, name in enumerate(model.feature_names)}
    rng = random.Random(seed)
    kept: list[tuple[int, str, dict[int, float]]] = []
    stats = EventSample(X=sp.csr_array((0, model.n_features)), ids=[], source=source)
    n_valid = 0
    for item in items:
        stats.n_read += 1
        if item is None:
            stats.n_invalid += 1
            continue
        event_id, feats = item
        pairs = feats.items() if isinstance(feats, Mapping) else ((f, 1.0) for f in feats)
        row: dict[int, float] = {}
        for name, value in pairs:
            i = index.get(name)
            if i is None:
                i = index.get(name.strip())
            if i is None:
                stats.n_unknown_features += 1
                continue
            row[i] = row.get(i, 0.0) + float(value)
        if not row:
            stats.n_unknown_only += 1
            continue
        entry = (stats.n_read, str(event_id), row)
        if len(kept) < sample:
            kept.append(entry)
        else:
            j = rng.randrange(n_valid + 1)
            if j < sample:
                kept[j] = entry
        n_valid += 1
    kept.sort(key=lambda t: t[0])
    rows, cols, vals = [], [], []
    for r, (_, _, row) in enumerate(kept):
        for i in sorted(row):
            rows.append(r)
            cols.append(i)
            vals.append(1.0 if model.family == "bernoulli" else row[i])
    stats.X = sp.csr_array(
        (
            np.asarray(vals, dtype=float),
            (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)),
        ),
        shape=(len(kept), model.n_features),
    )
    stats.ids = [t[1] for t in kept]
    return stats


@dataclass(frozen=True)
class HeatmapData:
    """Sampled events (rows, grouped by leaf in layout order) × top features (columns).

    ``cells`` lists (row, column, value) of the non-zero cells; ``row_leaf[r]`` is row r's leaf;
    ``bands`` lists (leaf id, first row, number of rows) for the row groups.
    """

    features: tuple[FeatureLabel, ...]
    n_rows: int
    row_leaf: tuple[int, ...]
    bands: tuple[tuple[int, int, int], ...]
    cells: tuple[tuple[int, int, float], ...]
    vmax: float
    colours: dict[int, str]
    n_events: int
    note: str
    names: dict[int, str] = field(default_factory=dict)  # leaf id → "L3"


def heatmap_data(
    model: HierarchyModel,
    layout: TreeLayout,
    events: EventSample,
    *,
    codes: CodeMap | None = None,
    n_top: int = 40,
) -> HeatmapData:
    """Route the sampled events, sort them by leaf (layout order, then file order)."""
    import scipy.sparse as sp  # the report's event sample only: inspect never loads scipy

    root = np.asarray(model.root.mean, dtype=float)
    feats = np.lexsort((np.arange(root.size), -root))[: min(n_top, root.size)]
    feats = feats[root[feats] > 0]
    X = events.X
    leaves = model.route(X).leaf_ids if X.shape[0] else np.zeros(0, dtype=np.int64)
    pos = {nid: i for i, nid in enumerate(layout.leaf_order)}
    order = sorted(range(X.shape[0]), key=lambda r: (pos[int(leaves[r])], r))
    sub = sp.csr_array(X[order][:, feats]) if X.shape[0] else sp.csr_array((0, feats.size))
    coo = sub.tocoo()
    cells = tuple(
        sorted(
            (int(r), int(c), float(v))
            for r, c, v in zip(coo.row, coo.col, coo.data, strict=True)
            if v
        )
    )
    row_leaf = tuple(int(leaves[r]) for r in order)
    bands: list[tuple[int, int, int]] = []
    for r, leaf in enumerate(row_leaf):
        if bands and bands[-1][0] == leaf:
            bands[-1] = (leaf, bands[-1][1], bands[-1][2] + 1)
        else:
            bands.append((leaf, r, 1))
    vmax = max((v for _, _, v in cells), default=1.0)
    note = (
        f"{len(row_leaf)} of {events.n_read} events (seeded sample)"
        + (f"; {events.n_invalid} unreadable" if events.n_invalid else "")
        + (f"; {events.n_unknown_only} with no known feature" if events.n_unknown_only else "")
    )
    return HeatmapData(
        features=tuple(feature_label(model, int(i), codes) for i in feats),
        n_rows=len(row_leaf),
        row_leaf=row_leaf,
        bands=tuple(bands),
        cells=cells,
        vmax=float(vmax),
        colours=layout.colours,
        n_events=events.n_read,
        note=note,
        names=layout.names,
    )


_LINEAGE_FIRST = ("event", "kind", "node", "node_id", "children", "version", "n_events", "weight")


def iter_lineage_columns(records: Iterable[dict[str, Any]]) -> list[str]:
    """The lineage table's columns: the usual keys first, then the others as first seen.

    >>> iter_lineage_columns([{"weight": 1, "extra": 2, "event": "split"}])
    ['event', 'weight', 'extra']
    """
    seen: list[str] = []
    for rec in records:
        for key in rec:
            if key not in seen:
                seen.append(key)
    return [k for k in _LINEAGE_FIRST if k in seen] + [k for k in seen if k not in _LINEAGE_FIRST]
