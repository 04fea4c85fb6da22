"""A cluster tree a reader can use: plain text (``print(model)``) and HTML (notebooks).

Every node is shown with its id, its weight and share of the root's weight, and (by default)
its five most relevant features — relevance λ log p(w|c) + (1 − λ) log(p(w|c)/p(w)), λ = 0.7,
against the root's mean (Sievert & Shirley 2014; thesis eq. 3.8, 4.12; see
:mod:`streammom.relevance`). Leaves are marked with ``*``. Only numpy and the standard library
are used, so this works wherever the model loads (the richer views are in
:mod:`streammom.report`).

>>> import numpy as np
>>> from streammom.model import HierarchyModel, Router, TreeNode
>>> router = Router(np.array([[1.0, 0.0], [0.0, 1.0]]), np.zeros(2), absolute=True)
>>> model = HierarchyModel([
...     TreeNode(0, -1, 0, 10.0, np.array([0.5, 0.5]), (1, 2), router),
...     TreeNode(1, 0, 1, 6.0, np.array([0.9, 0.1])),
...     TreeNode(2, 0, 1, 4.0, np.array([0.1, 0.9]))], n_features=2,
...     feature_names=["E11.9", "I10"])
>>> print(describe_model(model, n_top=1))
HierarchyModel v0: dsidiwo/bernoulli, 3 nodes, 2 leaves, depth 1, 2 features
0  weight 10 (100%)
├── 1*  weight 6 (60%)  E11.9 (90%)
└── 2*  weight 4 (40%)  I10 (90%)

A leaf the refined mixture gives no events (its ``score``'s share; the model's
``empty_leaves()``) is said to be empty, on its line and in the header:

>>> from streammom.model import LeafScore
>>> model = HierarchyModel([
...     TreeNode(0, -1, 0, 10.0, np.array([0.5, 0.5]), (1, 2), router),
...     TreeNode(1, 0, 1, 6.0, np.array([0.9, 0.1]), score=LeafScore(np.ones(2), 0.0, 1.0)),
...     TreeNode(2, 0, 1, 4.0, np.array([0.1, 0.9]), score=LeafScore(np.ones(2), -9.0, 0.0))],
...     n_features=2, feature_names=["E11.9", "I10"])
>>> print(describe_model(model, n_top=0))  # doctest: +NORMALIZE_WHITESPACE
HierarchyModel v0: dsidiwo/bernoulli, 3 nodes, 2 leaves (1 empty: the refined mixture gives
them no events, so predict labels their events with other leaves), depth 1, 2 features
0  weight 10 (100%)
├── 1*  weight 6 (60%)
└── 2*  weight 4 (40%)  [empty: labels no event]
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from streammom.relevance import FeatureScore, top_features

if TYPE_CHECKING:
    from streammom.model import HierarchyModel

__all__ = ["describe_model", "model_html"]


#: What an empty leaf is (:meth:`~streammom.model.HierarchyModel.empty_leaves`), in a line.
EMPTY_LEAVES = ("the refined mixture gives them no events, so predict labels their events with "
                "other leaves")


def _fmt_weight(w: float) -> str:
    return f"{w:,.0f}" if abs(w) >= 10 or float(w).is_integer() else f"{w:,.3g}"


def _top(model: HierarchyModel, node_id: int, n_top: int) -> list[FeatureScore]:
    if n_top <= 0 or node_id == model.root_id:
        return []
    return top_features(model.nodes[node_id].mean, model.root.mean, n=n_top,
                        family=model.family, feature_names=model.feature_names)


def _feature_text(model: HierarchyModel, f: FeatureScore) -> str:
    if model.family == "bernoulli":
        return f"{f.name} ({f.probability:.0%})"
    return f"{f.name} (x{f.lift:.1f})"


def _header(model: HierarchyModel, empty: frozenset[int]) -> str:
    def count(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    return (f"HierarchyModel v{model.version}: {model.method}/{model.family}, "
            f"{count(len(model.nodes), 'node', 'nodes')}, "
            f"{count(model.n_leaves, 'leaf', 'leaves')}"
            f"{f' ({len(empty)} empty: {EMPTY_LEAVES})' if empty else ''}, "
            f"depth {model.max_depth}, "
            f"{count(model.n_features, 'feature', 'features')}")


def _node_line(model: HierarchyModel, nid: int, n_top: int, empty: frozenset[int]) -> str:
    node = model.nodes[nid]
    total = model.root.weight
    share = node.weight / total if total > 0 else 0.0
    mark = "*" if node.is_leaf else ""
    line = f"{nid}{mark}  weight {_fmt_weight(node.weight)} ({share:.0%})"
    if nid in empty:
        line += "  [empty: labels no event]"
    top = _top(model, nid, n_top)
    if top:
        line += "  " + ", ".join(_feature_text(model, f) for f in top)
    return line


def describe_model(model: HierarchyModel, *, n_top: int = 5) -> str:
    """The tree as indented text: a header, then one line per node (DFS, children in order)
    with its ``n_top`` most relevant features (probability in the cluster for code sets, lift
    over the whole population for counts)."""
    empty = frozenset(model.empty_leaves())
    lines = [_header(model, empty), _node_line(model, model.root_id, n_top, empty)]

    def walk(nid: int, prefix: str) -> None:
        kids = model.nodes[nid].children
        for i, child in enumerate(kids):
            last = i == len(kids) - 1
            branch = "└── " if last else "├── "
            lines.append(prefix + branch + _node_line(model, child, n_top, empty))
            walk(child, prefix + ("    " if last else "│   "))

    walk(model.root_id, "")
    return "\n".join(lines)


def model_html(model: HierarchyModel, *, n_top: int = 5) -> str:
    """The tree as a self-contained HTML fragment (nested collapsible lists; every string
    escaped), for Jupyter's ``_repr_html_``."""

    empty = frozenset(model.empty_leaves())

    def node(nid: int) -> str:
        text = html.escape(_node_line(model, nid, n_top, empty))
        kids = model.nodes[nid].children
        if not kids:
            return f"<li><code>{text}</code></li>"
        inner = "".join(node(c) for c in kids)
        return (f"<li><details open><summary><code>{text}</code></summary>"
                f"<ul style='list-style:none;margin:0;padding-left:1.2em'>{inner}</ul>"
                f"</details></li>")

    return (f"<div class='streammom-model'><strong>{html.escape(_header(model, empty))}</strong>"
            f"<ul style='list-style:none;margin:0;padding-left:0'>{node(model.root_id)}</ul>"
            f"</div>")
