"""The engine's node tree and the kinds of refit plan (design §3, §5).

* :class:`Node` — the mutable state of one node: its moment sums, reservoir, children and
  router. The published, immutable tree is :class:`~streammom.model.HierarchyModel`.
* :func:`subtree` / :func:`leaf_layout` — walks over the ``{id: Node}`` map: a node and its
  descendants in DFS order, and the DFS rank of every leaf with each node's contiguous range of
  leaf ranks (the hot path sorts a batch by leaf rank so every node's rows are one slice).
* The plan kinds a refit's post-order pass decides per internal node, applied top-down
  afterwards (a parent's re-split or prune overrides its descendants' plans):
  :class:`Prune`, :class:`Resplit`, :class:`Update`, :class:`Stale`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from streammom.model import LeafScore, Router, TreeNode, subtree
from streammom.moments import MomentAccumulator
from streammom.packed import Packed, packed_line_positions
from streammom.reservoir import Reservoir
from streammom.split import Split

__all__ = ["LeafLayout", "Node", "Plan", "Prune", "Resplit", "Stale", "Update", "leaf_layout",
           "remove_tree_columns", "subtree", "tree_nodes", "widen_tree"]


@dataclass
class Node:
    """Mutable per-node state of the engine (the published tree is ``model_``)."""

    node_id: int
    parent: int
    depth: int
    acc: MomentAccumulator
    reservoir: Reservoir
    children: list[int] = field(default_factory=list)
    router: Router | None = None
    discriminators: np.ndarray | None = None
    quality: dict[str, float] = field(default_factory=dict)
    fresh: float = 0.0  # stored weight received since this node's last refit
    arrived: float = 0.0  # leaves: stored weight routed here since the engine's last refit
    refit_rows: int = 0  # leaves: rows of the root's sample routed here at the last refit
    backoff: int = 0  # consecutive stable refits (each doubles the new-weight fraction needed)
    born_version: int = 0
    stop_reason: str | None = None  # leaves: why the last refit did not split it (STOP_REASONS)
    score: LeafScore | None = None  # leaves: component of the last refinement's mixture

    @property
    def is_leaf(self) -> bool:
        return not self.children


def widen_tree(nodes: Mapping[int, Node], d_new: int) -> None:
    """Grow every node to ``d_new`` features (new vocabulary columns, all sums zero).

    Exact: no event has touched the new columns, so their moments are zero, and a router's
    weight on them is zero for both children — the routing of every row is unchanged (a MAP
    router would give both children the same floored weight there, which cancels in s₁ − s₀);
    the same for the leaves' scores, zero on them for every leaf.
    """
    for v in nodes.values():
        d = v.acc.n_features
        v.acc.widen(d_new)
        v.reservoir.n_features = d_new
        if v.router is not None:
            weights = np.hstack([v.router.weights, np.zeros((2, d_new - d))])
            v.router = Router(weights, v.router.bias, v.router.absolute)
        if v.discriminators is not None:
            v.discriminators = np.hstack([v.discriminators, np.zeros((2, d_new - d))])
        if v.score is not None:
            v.score = replace(v.score, weights=np.concatenate([v.score.weights,
                                                               np.zeros(d_new - d)]))


def remove_tree_columns(nodes: Mapping[int, Node], columns: np.ndarray) -> None:
    """Remove features ``columns`` from every node (recycled vocabulary columns): the sums
    (:meth:`~streammom.moments.MomentAccumulator.remove_columns`), the reservoir rows, and the
    routers', discriminators' and leaf scores' weights there (set to zero for every child: a row's
    routing no longer depends on them, and rows without them route as before)."""
    if not len(columns) or not nodes:
        return
    d = next(iter(nodes.values())).acc.n_features
    positions = packed_line_positions(columns, d)
    for v in nodes.values():
        v.acc.remove_columns(columns, positions)
        v.reservoir.remove_columns(columns)
        if v.router is not None:
            weights = v.router.weights.copy()
            weights[:, columns] = 0.0
            v.router = Router(weights, v.router.bias, v.router.absolute)
        if v.discriminators is not None:
            v.discriminators = v.discriminators.copy()
            v.discriminators[:, columns] = 0.0
        if v.score is not None:
            weights = v.score.weights.copy()
            weights[columns] = 0.0
            v.score = replace(v.score, weights=weights)


def tree_nodes(nodes: Mapping[int, Node], root_id: int, scale: float) -> list[TreeNode]:
    """The live tree as immutable :class:`~streammom.model.TreeNode` records (pre-order), with
    true weights (stored weight × ``scale``, the decay clock's factor) and M1 as the mean."""
    out = []
    for nid in subtree(nodes, root_id):
        v = nodes[nid]
        out.append(TreeNode(node_id=nid, parent=v.parent, depth=v.depth,
                            weight=float(v.acc.weight * scale), mean=v.acc.first_moment(),
                            children=tuple(v.children), router=v.router,
                            quality=dict(v.quality),
                            stop_reason=v.stop_reason if v.is_leaf else None,
                            score=v.score if v.is_leaf else None))
    return out


@dataclass(frozen=True)
class LeafLayout:
    """Leaves in DFS order: ``rank[node_id]`` is a leaf's rank (-1 for internal nodes) and
    ``spans`` lists every node (DFS order) with its half-open range of leaf ranks."""

    rank: np.ndarray
    n_leaves: int
    spans: list[tuple[int, int, int]]


def leaf_layout(nodes: Mapping[int, Node], root_id: int) -> LeafLayout:
    """The :class:`LeafLayout` of the tree under ``root_id``."""
    order = subtree(nodes, root_id)
    leaves = [nid for nid in order if nodes[nid].is_leaf]
    rank = np.full(max(nodes) + 1, -1, dtype=np.int64)
    rank[leaves] = np.arange(len(leaves))
    span: dict[int, tuple[int, int]] = {}
    for nid in reversed(order):
        v = nodes[nid]
        if v.is_leaf:
            r = int(rank[nid])
            span[nid] = (r, r + 1)
        else:
            span[nid] = (span[v.children[0]][0], span[v.children[-1]][1])
    return LeafLayout(rank, len(leaves), [(nid, span[nid][0], span[nid][1]) for nid in order])


# ---------------------------------------------------------------------- refit plans
@dataclass(frozen=True)
class Prune:
    """Merge the node's children back: one holds < ``prune_fraction`` of its weight.
    ``full`` is the node's assembled C (it becomes the leaf's own)."""

    full: Packed
    child_weights: list[float]


@dataclass(frozen=True)
class Resplit:
    """The recomputed router sends more than ``resplit_threshold`` of the reservoir to the
    other child (``share``): rebuild the subtree from the reservoir with ``split``."""

    split: Split
    full: Packed
    share: float


@dataclass(frozen=True)
class Update:
    """Replace the router in place (``share`` of the reservoir re-routed)."""

    split: Split
    share: float


@dataclass(frozen=True)
class Stale:
    """The data no longer support a split: keep the router; a child that stops receiving
    events then decays and is pruned."""


Plan = Prune | Resplit | Update | Stale
