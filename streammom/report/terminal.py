"""The cluster tree in a terminal (``streammom inspect``) and as plain JSON.

:func:`render_tree` returns a :class:`rich.tree.Tree`: one line per node with its id, weight and
share of all events, then its most relevant features (relevance, λ = 0.7) with their names when
a code map is given. :func:`tree_summary` is the same content as a JSON-safe dict.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rich.console import Group
from rich.text import Text
from rich.tree import Tree

from streammom.model import HierarchyModel
from streammom.report.charts import PALETTE, feature_label, fmt_share, fmt_weight, preorder
from streammom.report.codes import CodeMap, load_codes
from streammom.report.html import format_time
from streammom.report.loader import model_info

__all__ = ["render_tree", "tree_summary"]


_MODEL_FIELDS = (
    "model_version", "method", "family", "n_features", "n_nodes", "n_leaves", "max_depth",
)


def _header(model: HierarchyModel, info: Mapping[str, Any]) -> Text:
    events = info.get("events_seen")
    text = Text()
    text.append(f"model v{model.version}", style="bold")
    text.append(f"  {model.method}/{model.family}  ", style="dim")
    text.append(f"{len(model.nodes)} nodes, {model.n_leaves} leaves, depth {model.max_depth}")
    if empty := len(model.empty_leaves()):
        text.append(f"  {empty} empty (they label no event)", style="yellow")
    if isinstance(events, int | float):
        text.append(f"  {int(events):,} events seen", style="dim")
    if info.get("last_refit_time") is not None:
        text.append(f"  last refit {format_time(info.get('last_refit_time'))}", style="dim")
    return text


def render_tree(
    model: HierarchyModel,
    info: Mapping[str, Any] | None = None,
    codes: CodeMap | str | os.PathLike[str] | None = None,
    n: int = 5,
    *,
    lam: float = 0.7,
) -> Tree:
    """A rich tree of the model: sizes (weight, share) and top ``n`` features with names."""
    info = info or {}
    code_map = load_codes(codes)
    total = max(float(model.root.weight), 1e-300)
    leaves = [nid for nid in preorder(model) if model.nodes[nid].is_leaf]
    colours = {nid: PALETTE[i % len(PALETTE)] for i, nid in enumerate(leaves)}
    empty = frozenset(model.empty_leaves())

    def label(nid: int) -> Group:
        node = model.nodes[nid]
        head = Text()
        head.append("● " if node.is_leaf else "○ ", style=colours.get(nid, "grey50"))
        head.append(f"#{nid}", style="bold")
        head.append("  leaf" if node.is_leaf else "", style="dim")
        head.append(f"  w {fmt_weight(float(node.weight))}  ")
        head.append(f"({fmt_share(float(node.weight) / total)})", style="cyan")
        if node.stop_reason not in (None, "max_leaves"):  # a full tree is the normal end
            head.append(f"  not split: {node.stop_reason}", style="yellow")
        if nid in empty:
            head.append("  empty: labels no event", style="yellow")
        lines = [head]
        for f in model.top_features(nid, n=n, lam=lam):
            lab = feature_label(model, f.index, code_map)
            line = Text("   ")
            line.append(lab.code, style="bold magenta")
            if lab.name:
                line.append(f" {lab.name}")
            line.append(f"  {100 * f.probability:.1f}%", style="dim")
            lines.append(line)
        return Group(*lines)

    tree = Tree(_header(model, info), guide_style="grey50")

    def add(parent: Tree, nid: int) -> None:
        branch = parent.add(label(nid))
        for child in model.nodes[nid].children:
            add(branch, child)

    add(tree, model.root_id)
    return tree


def tree_summary(
    model: HierarchyModel,
    info: Mapping[str, Any] | None = None,
    codes: CodeMap | str | os.PathLike[str] | None = None,
    n: int = 5,
    *,
    lam: float = 0.7,
) -> dict[str, Any]:
    """The content of :func:`render_tree` as a JSON-safe dict (``inspect --json``)."""
    info = dict(info or {})
    code_map = load_codes(codes)
    total = max(float(model.root.weight), 1e-300)
    empty = frozenset(model.empty_leaves())
    nodes = []
    for nid in preorder(model):
        node = model.nodes[nid]
        feats = []
        for f in model.top_features(nid, n=n, lam=lam):
            lab = feature_label(model, f.index, code_map)
            feats.append(
                {
                    "index": f.index,
                    "code": lab.code,
                    "name": lab.name,
                    "relevance": round(f.relevance, 6),
                    "probability": round(f.probability, 6),
                    "background": round(f.background, 6),
                }
            )
        nodes.append(
            {
                "id": nid,
                "parent": node.parent,
                "depth": node.depth,
                "leaf": node.is_leaf,
                "children": list(node.children),
                "weight": float(node.weight),
                "share": float(node.weight) / total,
                "stop_reason": node.stop_reason,
                "empty": nid in empty,
                "top_features": feats,
            }
        )
    shape = model_info(model)
    return {
        **{key: shape[key] for key in _MODEL_FIELDS},
        "events_seen": info.get("events_seen"),
        "last_refit_time": info.get("last_refit_time"),
        "kind": info.get("kind"),
        "lam": lam,
        "nodes": nodes,
        "lineage": info.get("lineage") or [],
    }
