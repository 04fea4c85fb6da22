"""The self-contained HTML report of a model snapshot.

One file, no network: inline CSS, inline SVG (no namespace URL, no external reference of any
kind) and a few lines of inline JavaScript that only mark the page as rendered (``data-rendered``
on ``<body>``) and record script errors (``data-errors``), so a headless browser can check it.
The same model, info and options give the same bytes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from streammom import __version__
from streammom.model import HierarchyModel
from streammom.report.charts import (
    EventSample,
    FrequencyTable,
    HeatmapData,
    SampleItem,
    TreeLayout,
    fmt_share,
    fmt_weight,
    frequency_table,
    heatmap_data,
    iter_lineage_columns,
    sample_events,
    tree_layout,
)
from streammom.report.codes import CodeMap, load_codes
from streammom.report.svg import frequency_svg, heatmap_svg, tree_svg

__all__ = ["ReportFigures", "build_report", "compute_figures", "format_time"]

LINEAGE_ROWS = 20

_CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; background: #ffffff; color: #1f2328;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Helvetica,
  Arial, sans-serif; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; border-bottom: 1px solid #d8dee4; padding-bottom: 4px; }
p.sub, p.note, footer { color: #59636e; margin: 4px 0 10px; }
.scroll { overflow-x: auto; border: 1px solid #d8dee4; border-radius: 6px; padding: 4px;
  background: #ffffff; }
table { border-collapse: collapse; font-size: 13px; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #eaeef2;
  vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.nowrap { white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.meta th { width: 180px; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px;
  margin-right: 6px; vertical-align: -1px; }
code { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
  font-size: 12px; }
svg .node:hover circle { stroke: #1f2328; stroke-width: 2.5; }
svg .freq-row:hover > rect:first-of-type { fill: #fff8c5; }
details pre { background: #f6f8fa; padding: 8px; border-radius: 6px; overflow-x: auto; }
""".strip()

# Marks the page as rendered, records script errors and where the tree is drawn (read by
# headless-browser tests).
_JS = (
    "window.addEventListener('error',function(e){var b=document.body;"
    "b.dataset.errors=(b.dataset.errors||'')+(e.message||'error')+';'});"
    "var b=document.body,t=document.querySelector('svg.tree');"
    "b.dataset.nodes=String(document.querySelectorAll('svg.tree .node').length);"
    "if(t){var r=t.getBoundingClientRect();"
    "b.dataset.treeBox=[r.left,r.top,r.width,r.height].map(Math.round).join(',');}"
    "b.dataset.rendered='ok';"
)


@dataclass(frozen=True)
class ReportFigures:
    """Everything a report draws, computed once (HTML, SVG and PNG exports share it)."""

    layout: TreeLayout
    frequency: FrequencyTable
    heatmap: HeatmapData | None


def compute_figures(
    model: HierarchyModel,
    *,
    codes: CodeMap | str | os.PathLike[str] | None = None,
    events: EventSample | Iterable[SampleItem] | None = None,
    lam: float = 0.7,
    n_labels: int = 4,
    n_frequent: int = 20,
    n_heatmap: int = 40,
    sample: int = 400,
    seed: int = 0,
) -> ReportFigures:
    """Lay out the tree, build the frequency table and (with ``events``) the heatmap."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    code_map = load_codes(codes)
    layout = tree_layout(model, codes=code_map, n_features=n_labels, lam=lam)
    freq = frequency_table(model, layout, codes=code_map, n_top=n_frequent)
    heat = None
    if events is not None:
        sample_data = (
            events
            if isinstance(events, EventSample)
            else sample_events(events, model, sample=sample, seed=seed)
        )
        heat = heatmap_data(model, layout, sample_data, codes=code_map, n_top=n_heatmap)
    return ReportFigures(layout=layout, frequency=freq, heatmap=heat)


def format_time(epoch: float | None) -> str:
    """Epoch seconds as an ISO 8601 UTC timestamp ('—' when unknown).

    >>> format_time(0.0)
    '1970-01-01T00:00:00Z'
    """
    if epoch is None or not math.isfinite(epoch):
        return "—"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fmt_value(key: str, value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if "time" in key.lower() and value > 1e8:
            return format_time(value)
        if value.is_integer():
            return f"{int(value):,}"
        return f"{value:,.1f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, list | tuple):
        return ", ".join(_fmt_value(key, v) for v in value)
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _meta_rows(model: HierarchyModel, info: Mapping[str, Any]) -> list[tuple[str, str]]:
    events = info.get("events_seen")
    source = Path(str(info.get("source", "—"))).name
    n_empty = len(model.empty_leaves())
    empty = f" ({n_empty} empty: they label no event)" if n_empty else ""
    return [
        ("Model version", str(model.version)),
        ("Snapshot", f"{info.get('kind', 'hierarchy-model')} · {source}"),
        ("Method / family", f"{model.method} / {model.family}"),
        ("Events seen", f"{int(events):,}" if isinstance(events, int | float) else "—"),
        ("Last refit (event time, UTC)", format_time(info.get("last_refit_time"))),
        ("Tree", f"{len(model.nodes)} nodes, {model.n_leaves} leaves{empty}, "
                 f"depth {model.max_depth}"),
        ("Features", f"{model.n_features:,}"),
        ("Root weight", fmt_weight(float(model.root.weight))),
    ]


def _table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    cls: str,
    numeric: set[int],
    nowrap: frozenset[int] = frozenset(),
) -> str:
    """An HTML table; cells are already-escaped HTML."""

    def attr(i: int) -> str:
        names = [n for n, on in (("num", i in numeric), ("nowrap", i in nowrap)) if on]
        return f' class="{" ".join(names)}"' if names else ""

    head = "".join(f"<th{attr(i)}>{escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{attr(i)}>{c}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _leaf_table(model: HierarchyModel, figs: ReportFigures) -> str:
    rows = []
    empty = frozenset(model.empty_leaves())
    for nid in figs.layout.leaf_order:
        box = figs.layout.node(nid)
        feats = "; ".join(
            f"<code>{escape(f.code)}</code> {escape(f.name)}"
            if f.name
            else f"<code>{escape(f.code)}</code>"
            for f in box.features
        )
        path = " → ".join(f"#{p}" for p in model.path_to(nid))
        rows.append(
            [
                f'<span class="swatch" style="background:{box.colour}"></span>'
                f"{escape(box.name)} <small>(#{nid})</small>"
                + (" <small>empty: labels no event</small>" if nid in empty else ""),
                escape(path),
                escape(fmt_weight(box.weight)),
                escape(fmt_share(box.share)),
                feats or "—",
            ]
        )
    return _table(
        ["Leaf", "Path", "Weight", "Share", f"Most relevant features (λ = {figs.layout.lam:g})"],
        rows,
        "leaves",
        {2, 3},
        frozenset({0, 1, 2, 3}),
    )


def _lineage_table(lineage: Sequence[Mapping[str, Any]]) -> str:
    if not lineage:
        return '<p class="note">No lineage recorded in this snapshot.</p>'
    # Structural changes (split, re-split, prune, …); in-place router updates are only counted.
    changes = [r for r in lineage if r.get("event") != "update"]
    updates = len(lineage) - len(changes)
    recent = changes[-LINEAGE_ROWS:][::-1]
    if not recent:
        return f'<p class="note">{updates} router updates and no structural change recorded.</p>'
    cols = iter_lineage_columns(recent)
    rows = [[escape(_fmt_value(c, rec.get(c))) for c in cols] for rec in recent]
    note = (
        f'<p class="note">The {len(recent)} most recent of {len(changes)} structural changes, '
        "newest first"
        + (f" ({updates} in-place router updates not shown)" if updates else "")
        + ".</p>"
    )
    return note + _table(cols, rows, "lineage", set())


def build_report(
    model: HierarchyModel,
    info: Mapping[str, Any] | None = None,
    *,
    codes: CodeMap | str | os.PathLike[str] | None = None,
    events: EventSample | Iterable[SampleItem] | None = None,
    lam: float = 0.7,
    figures: ReportFigures | None = None,
    **figure_options: Any,
) -> str:
    """The report as one self-contained HTML document (a ``str``).

    ``info`` is what :func:`streammom.report.load_model` returns (or ``None`` for a bare
    model); ``codes`` names features (``"icd10"``, a CSV path or a code map); ``events`` (decoded
    ``(id, features)`` items, see :func:`~streammom.report.charts.sample_events`, or an
    :class:`~streammom.report.charts.EventSample`) adds the heatmap. Pass precomputed
    ``figures`` to share them with PNG/SVG exports.
    """
    from streammom.report.loader import model_info

    info = dict(info) if info is not None else model_info(model)
    figs = figures or compute_figures(model, codes=codes, events=events, lam=lam, **figure_options)
    title = f"streammom report — model v{model.version}"
    events_seen = info.get("events_seen")
    sub = (
        f"{model.method} · {model.family} · {model.n_leaves} leaves · "
        + (f"{int(events_seen):,} events seen · " if isinstance(events_seen, int | float) else "")
        + (
            f"last refit {format_time(info.get('last_refit_time'))}"
            if info.get("last_refit_time") is not None
            else "refit time unknown"
        )
    )
    meta = "".join(
        f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in _meta_rows(model, info)
    )
    extra = info.get("metadata") or {}
    meta_details = (
        "<details><summary>Model metadata</summary><pre>"
        + escape(json.dumps(extra, sort_keys=True, indent=2, default=str))
        + "</pre></details>"
        if extra
        else ""
    )
    unit = "prevalence" if model.family == "bernoulli" else "mean count"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>\n{_CSS}\n</style></head>",
        '<body data-rendered="no">',
        f'<header><h1>{escape(title)}</h1><p class="sub">{escape(sub)}</p></header>',
        '<section id="tree"><h2>Cluster tree</h2>',
        '<p class="note">Node area is proportional to weight (events, possibly decayed); edge '
        "width to the child's share. "
        + ("Leaves are numbered L1… left to right; hover a node for its most relevant features "
           f"(relevance with λ = {figs.layout.lam:g}) and their {unit}, or see the Leaves "
           "table below.</p>"
           if figs.layout.compact else
           "Each node shows its most relevant features "
           f"(relevance with λ = {figs.layout.lam:g}) and their {unit} in the node.</p>"),
        f'<div class="scroll">{tree_svg(figs.layout)}</div></section>',
        '<section id="leaves"><h2>Leaves</h2>',
        f"{_leaf_table(model, figs)}</section>",
        '<section id="frequency"><h2>Feature frequency</h2>',
        f'<p class="note">The {len(figs.frequency.features)} most frequent features overall and '
        f"their {unit} inside each leaf.</p>",
        f'<div class="scroll">{frequency_svg(figs.frequency)}</div></section>',
    ]
    if figs.heatmap is not None:
        parts += [
            '<section id="heatmap"><h2>Event heatmap</h2>',
            f'<p class="note">{escape(figs.heatmap.note)}, routed with this model and ordered by '
            f"leaf, over the {len(figs.heatmap.features)} most frequent features. A dark cell "
            "means the event has the feature; the row tint is its leaf.</p>",
            f'<div class="scroll">{heatmap_svg(figs.heatmap)}</div></section>',
        ]
    parts += [
        '<section id="model"><h2>Model</h2>',
        f'<table class="meta"><tbody>{meta}</tbody></table>{meta_details}</section>',
        '<section id="lineage"><h2>Recent changes (lineage)</h2>',
        f"{_lineage_table(info.get('lineage') or [])}</section>",
        f"<footer>Generated by streammom {escape(__version__)}.</footer>",
        f"<script>{_JS}</script>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
