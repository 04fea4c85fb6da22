"""The immutable hierarchy model: routing (assignment), interpretation and (de)serialisation.

A :class:`HierarchyModel` is what both the batch :class:`~streammom.HierarchicalMoM` and the
streaming :class:`~streammom.StreamingHierarchy` publish: a binary tree whose internal nodes
carry a linear :class:`Router`. Routing is one compiled pass: each row is scored only by the
routers on its own path (no per-event Python loop).

Routers (design §4):

* D-SIDIWO: child = argmax_j |⟨d_j, x⟩| with D = Oᵀ S^{-1/2} Uᵀ (thesis eq. 6.11),
  ``absolute=True``, bias 0.
* MAP (SIDIWO, EM): child = argmax_j log ω_j + log p(x | μ_j). For Bernoulli
  log p = Σ_i log(1 − μ_ji) + Σ_i x_i log(μ_ji / (1 − μ_ji)) (thesis eq. 4.1, sparse form);
  for multinomial log p = Σ_i x_i log μ_ji + const (thesis eq. 3.4). Both are linear in x:
  weights + bias, ``absolute=False``.

The margin of a routing step is |score₀ − score₁|: how decisively the event took its branch.

Scored leaves (the streaming engine's likelihood refinement, design §5): when every leaf
carries a :class:`LeafScore` — its component of the refined k-component mixture as the linear
score s_l(x) = log π_l + log p(x | μ_l) (up to a per-row constant) — an event's label is the
MAP leaf argmax_l s_l(x) (thesis eq. 4.2 over the leaves' mixture), and its path the leaf's
ancestors. Equivalently each internal node sends the event to the child whose likeliest leaf
scores higher (the subtree collapsed by its best component), the margin being that score's
lead over the sibling subtree's best. :meth:`HierarchyModel.route_tree` keeps the router
walk, which the engine's sums follow.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from streammom import _kernels
from streammom.family import FAMILIES, Family, check_family
from streammom.relevance import FeatureScore, top_features
from streammom.serialization import (
    SnapshotFormatError,
    archive_bytes,
    check_manifest,
    read_archive,
)

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["EMPTY_LEAF_EVENTS", "FLOOR_MARK", "FLOOR_SPLIT_ROWS", "REFUSED_SPLITS",
           "STOP_REASONS", "HierarchyModel", "LeafScore", "Router", "Routing", "TreeNode",
           "describe_refusals", "leaf_scores", "map_router", "subtree"]

MODEL_SCHEMA_VERSION = 1
MAX_NODE_ID = 2**24 - 1
"""Largest node id a snapshot may hold: routing (and the engine) keep tables indexed by node
id (8 bytes per id up to the largest), so a crafted id of 2**40 must not allocate 8 TiB. Ids
are handed out two per split, so a live engine needs ~8 million splits to get here."""
_MU_FLOOR = 1e-6


@dataclass(frozen=True)
class Router:
    """A 2-way linear router: scores s_j = ⟨w_j, x⟩ + b_j, child = argmax_j s_j (or |s_j|)."""

    weights: np.ndarray  # (2, d)
    bias: np.ndarray  # (2,)
    absolute: bool

    def __post_init__(self) -> None:
        if self.weights.ndim != 2 or self.weights.shape[0] != 2 or self.bias.shape != (2,):
            raise ValueError("a router needs weights of shape (2, d) and bias of shape (2,)")

    def same_as(self, other: Router | None) -> bool:
        """Whether ``other`` is this router exactly (same mode, bit-identical parameters)."""
        return (other is not None and self.absolute == other.absolute
                and np.array_equal(self.weights, other.weights)
                and np.array_equal(self.bias, other.bias))

    def side(self, X: sp.csr_array | np.ndarray) -> np.ndarray:
        """The child (0 or 1) of every row: 1 where s₁ > s₀, ties to 0 (int64, shape (n,)).

        s_j = ⟨w_j, x⟩ + b_j, or |s_j| for a D-SIDIWO router (thesis eq. 6.11; MAP routers,
        thesis Alg. 4, eq. 4.1). This is the routing rule of the whole library — the batch tree,
        the refit and EM use it; :func:`streammom._kernels.route_rows` is its compiled walk
        down a whole tree (tested equal, ties included).

        >>> Router(np.array([[1.0, 0.0], [0.0, 1.0]]), np.zeros(2), absolute=False).side(
        ...     np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])).tolist()
        [0, 1, 0]
        """
        scores = np.asarray(X @ self.weights.T) + self.bias
        if self.absolute:
            scores = np.abs(scores)
        return (scores[:, 1] > scores[:, 0]).astype(np.int64)


def subtree(nodes: Mapping[int, Any], node_id: int) -> list[int]:
    """``node_id`` and its descendants, in DFS pre-order (children in order), in a mapping of
    nodes with ``children`` (the model's :class:`TreeNode` or the engine's
    :class:`~streammom.tree.Node`)."""
    out, stack = [], [node_id]
    while stack:
        v = stack.pop()
        out.append(v)
        stack.extend(reversed(nodes[v].children))
    return out


@dataclass(frozen=True)
class LeafScore:
    """A leaf's mixture component as a linear score s(x) = ⟨w, x⟩ + b (module docstring), and
    ``share``, the component's mixing weight ω_j in the refined mixture (its share of the
    events; None in models written before it was kept)."""

    weights: np.ndarray  # (d,)
    bias: float
    share: float | None = None

    def same_as(self, other: LeafScore | None) -> bool:
        """Whether ``other`` is this score exactly (bit-identical parameters)."""
        return (other is not None and self.bias == other.bias and self.share == other.share
                and np.array_equal(self.weights, other.weights))


def _log_linear(mu: np.ndarray, omega: np.ndarray, family: Family, floor: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """(weights, bias) of log ω_j + log p(x | μ_j) as linear functions of x (module
    docstring), centres clipped into [floor, 1 − floor] (Bernoulli) or floored and
    renormalised (multinomial) and ω floored, so log 0 never occurs (digest §7, pitfall 7)."""
    omega = np.clip(np.asarray(omega, dtype=float), floor, None)
    omega = omega / omega.sum()
    mu = np.asarray(mu, dtype=float)
    if family == "bernoulli":
        mu = np.clip(mu, floor, 1.0 - floor)
    else:
        check_family(family)
        mu = np.maximum(mu, floor)
        mu = mu / mu.sum(axis=1, keepdims=True)
    from streammom.mixture import log_linear_params  # scipy: not loaded by model-only reads

    return log_linear_params(mu, omega, family)


def leaf_scores(centres: np.ndarray, weights: np.ndarray, family: Family, *,
                floor: float = _MU_FLOOR) -> list[LeafScore]:
    """The :class:`LeafScore` of every component of a k-component mixture (centres (k, d),
    mixing weights (k,)): s_j(x) = log ω_j + log p(x | μ_j) (thesis eq. 4.1 / 3.4), each with
    its share ω_j / Σ ω."""
    w, b = _log_linear(centres, weights, family, floor)
    share = np.asarray(weights, dtype=float) / float(np.sum(weights))
    return [LeafScore(w[j], float(b[j]), float(share[j])) for j in range(w.shape[0])]


def map_router(
    centres: np.ndarray,
    weights: np.ndarray,
    family: Family,
    *,
    floor: float = _MU_FLOOR,
) -> Router:
    """The MAP router of a 2-component mixture (centres (2, d), mixing weights (2,)).

    Centres are clipped into [floor, 1 − floor] (Bernoulli) or floored and renormalised to sum 1
    (multinomial) first, so log 0 never occurs (thesis digest §7, pitfall 7).
    """
    w, b = _log_linear(centres, weights, family, floor)
    return Router(weights=w, bias=b, absolute=False)


#: The ``quality`` key marking a provisional split of the growth floor (:mod:`streammom.refit`),
#: also set on its lineage records.
FLOOR_MARK = "growth_floor"

#: Rows a leaf needs to split under the growth floor (at most ``min_reservoir_split``), where
#: the tree would otherwise stay below half its leaf budget on a stream too short for it
#: (:meth:`streammom.refit.RefitPass._grow_to_floor`).
FLOOR_SPLIT_ROWS = 8

#: Why a leaf is not split, as the model records it (``TreeNode.stop_reason``): the streaming
#: engine's reasons, then those only the batch :class:`~streammom.HierarchicalMoM` gives.
STOP_REASONS: dict[str, str] = {
    "first_refit": "no refit has run yet (the first comes after first_refit events, or "
                   "call refit()): every event is in the root",
    "max_leaves": "the leaf budget (max_leaves) is spent",
    "max_depth": "the leaf is at max_depth",
    "min_split_weight": "its weight is below min_split_weight",
    "min_reservoir": "its reservoir holds fewer rows than min_reservoir_split "
                     f"({FLOOR_SPLIT_ROWS} while the tree is below half its leaf budget)",
    "moments": "its moments give no split (degenerate or rank-deficient data)",
    "short_documents": "its documents are too short for single-topic moments (multinomial "
                       "needs documents of at least 3 tokens)",
    "split_quality": "its split is below the quality floors (min_rotation_gap, "
                     "min_spectral_gap)",
    "one_sided": "its split leaves a child below min_child_fraction, even after EM",
    "min_node_size": "fewer rows than min_node_size",
    "rank": "its second moment has rank < 2",
    "rotation_gap": "the eigen-gap of G is below min_rotation_gap",
}


def read_stop_reason(meta: Mapping[str, Any]) -> str | None:
    """A stored node's stop reason, checked against :data:`STOP_REASONS` (None if absent)."""
    reason = meta.get("stop_reason")
    if reason is None:
        return None
    if reason not in STOP_REASONS or meta.get("children"):
        raise SnapshotFormatError(f"malformed hierarchy model: stop_reason {reason!r}")
    return str(reason)


#: A leaf is empty when the refined mixture gives it less than this many events' weight
#: (:meth:`HierarchyModel.empty_leaves`).
EMPTY_LEAF_EVENTS = 0.5


def read_share(share: Any) -> float | None:
    """A stored leaf score's share ω_j, checked (None if absent: written before it was kept)."""
    if share is None:
        return None
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise SnapshotFormatError(f"malformed hierarchy model: share {share!r}")
    return float(share)


#: The stop reasons that mean the data refused a split (the others are limits of the settings).
REFUSED_SPLITS: tuple[str, ...] = ("moments", "short_documents", "split_quality", "one_sided")


def describe_refusals(refused: Mapping[str, int]) -> str:
    """``"2 one_sided: <what it means>; …"`` for a warning (log line or CLI)."""
    return "; ".join(f"{c} {r}: {STOP_REASONS[r]}" for r, c in refused.items())


@dataclass(frozen=True)
class TreeNode:
    """One node of the cluster tree.

    ``weight`` is the (possibly decayed) number of events the node has seen, ``mean`` its first
    moment s / W. Internal nodes have two ``children`` and a ``router``; leaves have neither.
    ``quality`` holds the split-quality signals measured when the split was made (and
    ``growth_floor`` 1.0 on a provisional split of a stream too short for half its leaf
    budget, undone at the next refit: :mod:`streammom.refit`); ``stop_reason`` (a key of
    :data:`STOP_REASONS`, leaves only) why the leaf is not split, None when nothing stops it
    (it splits once it has seen enough new events); ``score`` (leaves only) the leaf's
    component of the refined mixture (module docstring).
    """

    node_id: int
    parent: int
    depth: int
    weight: float
    mean: np.ndarray
    children: tuple[int, ...] = ()
    router: Router | None = None
    quality: Mapping[str, float] = field(default_factory=dict)
    stop_reason: str | None = None
    score: LeafScore | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class Routing:
    """The result of routing a batch: leaf per row, node path and per-level margins.

    ``paths[i]`` lists node ids root → leaf, padded with −1; ``margins[i, l]`` is the margin of
    the decision taken at level l (NaN below the leaf).
    """

    leaf_ids: np.ndarray  # (n,) int64
    paths: np.ndarray  # (n, max_depth + 1) int64
    margins: np.ndarray  # (n, max_depth) float64
    model_version: int

    def records(self) -> list[dict[str, Any]]:
        """One plain dict per row (for JSON): leaf id, path, margins and model version."""
        out = []
        for leaf, path, margin in zip(self.leaf_ids, self.paths, self.margins, strict=True):
            depth = int((path >= 0).sum())
            out.append(
                {
                    "leaf_id": int(leaf),
                    "path": [int(v) for v in path[:depth]],
                    "margins": [float(m) for m in margin[: depth - 1]],
                    "model_version": self.model_version,
                }
            )
        return out


class HierarchyModel:
    """An immutable, serialisable binary cluster tree with vectorised routing.

    Parameters mirror the fitted tree: ``nodes`` (any order; exactly one root with parent −1),
    ``n_features``, ``family`` ('bernoulli' or 'multinomial'), ``method`` (how the splits were
    found), ``version`` (bumped on every change by the streaming engine), optional
    ``feature_names`` and free-form JSON ``metadata``.
    """

    def __init__(
        self,
        nodes: Iterable[TreeNode],
        *,
        n_features: int,
        family: Family = "bernoulli",
        method: str = "dsidiwo",
        version: int = 0,
        feature_names: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self.nodes: dict[int, TreeNode] = {n.node_id: n for n in sorted(nodes, key=_node_key)}
        self.n_features = int(n_features)
        self.family = family
        self.method = method
        self.version = int(version)
        self.feature_names = tuple(feature_names) if feature_names is not None else None
        self.metadata = dict(metadata or {})
        self._validate()
        self._build_routing_tables()

    # ------------------------------------------------------------------ structure
    def _validate(self) -> None:
        self.root_id = check_tree(
            {n.node_id: (n.parent, n.children) for n in self.nodes.values()}
        )
        for node in self.nodes.values():
            # routing sizes its path arrays by the deepest depth: depths must be the real ones
            depth = 0 if node.node_id == self.root_id else self.nodes[node.parent].depth + 1
            if node.depth != depth:
                raise ValueError(f"node {node.node_id}: depth {node.depth}, expected {depth}")
            if node.mean.shape != (self.n_features,):
                raise ValueError(f"node {node.node_id}: mean has shape {node.mean.shape}")
            if node.children:
                if len(node.children) != 2 or node.router is None:
                    raise ValueError(
                        f"node {node.node_id}: internal nodes need 2 children + router"
                    )
                if node.router.weights.shape[1] != self.n_features:
                    raise ValueError(f"node {node.node_id}: router has the wrong dimension")
                for c in node.children:
                    if c not in self.nodes or self.nodes[c].parent != node.node_id:
                        raise ValueError(f"node {node.node_id}: child {c} is not linked back")
            if node.score is not None and (node.children or node.score.weights.shape
                                           != (self.n_features,)):
                raise ValueError(f"node {node.node_id}: a score needs a leaf and shape "
                                 f"({self.n_features},)")
        if self.feature_names is not None and len(self.feature_names) != self.n_features:
            raise ValueError("feature_names must have n_features entries")

    def _build_routing_tables(self) -> None:
        internal = [n for n in self.nodes.values() if n.children]
        self._internal_index = {n.node_id: i for i, n in enumerate(internal)}
        d = self.n_features
        self._router_w = (
            np.vstack([n.router.weights for n in internal]) if internal else np.zeros((0, d))
        )
        self._router_b = (
            np.concatenate([n.router.bias for n in internal]) if internal else np.zeros(0)
        )
        self._router_abs = np.array([n.router.absolute for n in internal], dtype=bool)
        self._children = np.array([n.children for n in internal], dtype=np.int64).reshape(-1, 2)
        max_id = max(self.nodes)
        self._int_of_node = np.full(max_id + 1, -1, dtype=np.int64)
        for nid, i in self._internal_index.items():
            self._int_of_node[nid] = i
        self.max_depth = max(n.depth for n in self.nodes.values())
        leaves = [n for n in self.nodes.values() if n.is_leaf]
        self.scored = len(leaves) > 1 and all(n.score is not None for n in leaves)
        if self.scored:
            self._leaf_w = np.vstack([n.score.weights for n in leaves])  # type: ignore[union-attr]
            self._leaf_b = np.array([n.score.bias for n in leaves])  # type: ignore[union-attr]
            self._leaf_id = np.array([n.node_id for n in leaves], dtype=np.int64)
            self._leaf_path = np.full((len(leaves), self.max_depth + 1), -1, dtype=np.int64)
            for i, n in enumerate(leaves):
                path = self.path_to(n.node_id)
                self._leaf_path[i, :len(path)] = path
            rank = {n.node_id: i for i, n in enumerate(leaves)}
            # per internal node: the leaves (indices into the leaf table) under each child
            self._subtree_leaves = {
                v.node_id: tuple(np.array([rank[u] for u in subtree(self.nodes, c) if u in rank])
                                 for c in v.children)
                for v in internal}

    @property
    def leaf_ids(self) -> tuple[int, ...]:
        """Ids of the leaves, ascending."""
        return tuple(nid for nid, n in self.nodes.items() if n.is_leaf)

    @property
    def n_leaves(self) -> int:
        return len(self.leaf_ids)

    @property
    def root(self) -> TreeNode:
        return self.nodes[self.root_id]

    def stopped_leaves(self) -> dict[str, int]:
        """Leaves by the reason they are not split (:data:`STOP_REASONS`), by reason name."""
        counts = Counter(n.stop_reason for n in self.nodes.values()
                         if n.is_leaf and n.stop_reason is not None)
        return dict(sorted(counts.items()))

    def empty_leaves(self) -> tuple[int, ...]:
        """Ids of the leaves the refined mixture gives less than :data:`EMPTY_LEAF_EVENTS` of
        the events' weight (share ω_l × the root's weight): ``predict`` labels (almost) no
        event with them, though the routers still send events there. The refinement's
        search may end with fewer components than leaves — its moves judged by the
        evidence merge clusters whose few events cannot tell them apart — and the tree keeps
        the leaves it grew (design §5); this says so, never silently. Empty for a model
        whose leaves are not scored or whose scores carry no share."""
        total = self.root.weight
        return tuple(n.node_id for n in self.nodes.values()
                     if n.is_leaf and n.score is not None and n.score.share is not None
                     and n.score.share * total < EMPTY_LEAF_EVENTS)

    def provisional_splits(self) -> tuple[int, ...]:
        """Ids of the internal nodes split by the growth floor of a stream too short for half
        its leaf budget (quality ``growth_floor``; :mod:`streammom.refit`): provisional, from
        as few as :data:`FLOOR_SPLIT_ROWS` rows, and undone at the next refit, which grows the
        tree again."""
        return tuple(n.node_id for n in self.nodes.values()
                     if not n.is_leaf and FLOOR_MARK in n.quality)

    def refused_splits(self, max_leaves: int) -> dict[str, int]:
        """Leaves whose split the data refused (:data:`REFUSED_SPLITS`) when they keep the
        tree below ``max_leaves``, by reason; empty otherwise (nothing to report)."""
        if self.n_leaves >= max_leaves:
            return {}
        return {r: c for r, c in self.stopped_leaves().items() if r in REFUSED_SPLITS}

    def path_to(self, node_id: int) -> list[int]:
        """Node ids from the root to ``node_id``."""
        path = [node_id]
        while self.nodes[path[-1]].parent >= 0:
            path.append(self.nodes[path[-1]].parent)
        return path[::-1]

    def replace(
        self,
        *,
        version: int | None = None,
        feature_names: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> HierarchyModel:
        """A copy with a new version, feature names or metadata (the tree is shared).

        >>> m = HierarchyModel([TreeNode(0, -1, 0, 1.0, np.zeros(2))], n_features=2)
        >>> m.replace(version=3, feature_names=["a", "b"]).feature_names
        ('a', 'b')
        """
        return HierarchyModel(
            self.nodes.values(),
            n_features=self.n_features,
            family=self.family,
            method=self.method,
            version=self.version if version is None else version,
            feature_names=self.feature_names if feature_names is None else feature_names,
            metadata=self.metadata if metadata is None else metadata,
        )

    # ------------------------------------------------------------------ routing
    def route_tree(self, X: Any, *, check_input: bool = True) -> Routing:
        """Route every row of ``X`` root → leaf by the routers. Cost O(nnz(X) · depth).

        Each row is scored only by the routers on its own path (compiled walk,
        :func:`streammom._kernels.route_rows`): at router r it goes to child 1 when
        s₁ > s₀ (s_j = ⟨w_j, x⟩ + b_j, or |s_j| for D-SIDIWO), with margin |s₀ − s₁|.
        ``check_input=False`` skips validation when ``X`` is already a float64 CSR array with
        sorted, duplicate-free, in-range indices and ``n_features`` columns (the engine's own
        batches).
        """
        if check_input:
            from streammom._validation import as_csr  # scipy: loaded by the first routing

            X = as_csr(X, self.n_features)
        n = X.shape[0]
        depth = self.max_depth
        leaf = np.full(n, self.root_id, dtype=np.int64)
        paths = np.full((n, depth + 1), -1, dtype=np.int64)
        margins = np.full((n, depth), np.nan)
        paths[:, 0] = self.root_id
        if self._router_w.shape[0] and n:
            _kernels.route_rows(X.indptr, X.indices, X.data, self._router_w, self._router_b,
                                self._router_abs, self._children, self._int_of_node,
                                self.root_id, leaf, paths, margins)
        return Routing(leaf_ids=leaf, paths=paths, margins=margins, model_version=self.version)

    def route(self, X: Any, *, check_input: bool = True) -> Routing:
        """The label of every row of ``X``: the MAP leaf when the leaves are scored (module
        docstring; cost O(nnz(X) · k + n · k · depth)), the router walk otherwise."""
        if not self.scored:
            return self.route_tree(X, check_input=check_input)
        if check_input:
            from streammom._validation import as_csr  # scipy: loaded by the first routing

            X = as_csr(X, self.n_features)
        S = np.asarray(X @ self._leaf_w.T) + self._leaf_b  # (n, k) leaf scores
        best = np.argmax(S, axis=1)  # ties to the lowest leaf id
        paths = self._leaf_path[best]
        margins = np.full((X.shape[0], self.max_depth), np.nan)
        top = S[np.arange(X.shape[0]), best]
        for nid, sides in self._subtree_leaves.items():
            level = self.nodes[nid].depth
            rows = np.flatnonzero(paths[:, level] == nid)
            if rows.size:
                right = paths[rows, level + 1] == self.nodes[nid].children[1]
                for went, sibling in ((right, sides[0]), (~right, sides[1])):
                    sub = rows[went]  # each row against the best leaf of the other child
                    margins[sub, level] = top[sub] - S[np.ix_(sub, sibling)].max(axis=1,
                                                                               initial=-np.inf)
        return Routing(leaf_ids=self._leaf_id[best], paths=paths, margins=margins,
                       model_version=self.version)

    def predict(self, X: Any) -> np.ndarray:
        """Leaf id of every row."""
        return self.route(X).leaf_ids

    # ------------------------------------------------------------------ interpretation
    def top_features(self, node_id: int, *, n: int = 10, lam: float = 0.7) -> list[FeatureScore]:
        """Relevance-ranked features of a node against the root (λ = 0.7, Sievert–Shirley)."""
        return top_features(
            self.nodes[node_id].mean,
            self.root.mean,
            n=n,
            lam=lam,
            family=self.family,
            feature_names=self.feature_names,
        )

    # ------------------------------------------------------------------ serialisation
    def to_archive(
        self, *, dtype: type = np.float64
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Manifest + arrays (see :mod:`streammom.serialization`)."""
        order = list(self.nodes)
        internal = [nid for nid in order if self.nodes[nid].children]
        manifest: dict[str, Any] = {
            "format": "streammom",
            "kind": "hierarchy-model",
            "schema_version": MODEL_SCHEMA_VERSION,
            "version": self.version,
            "family": self.family,
            "method": self.method,
            "n_features": self.n_features,
            "feature_names": list(self.feature_names) if self.feature_names else None,
            "metadata": self.metadata,
            "nodes": [
                {
                    "id": nid,
                    "parent": self.nodes[nid].parent,
                    "depth": self.nodes[nid].depth,
                    "weight": float(self.nodes[nid].weight),
                    "children": list(self.nodes[nid].children),
                    "absolute": bool(self.nodes[nid].router.absolute)
                    if self.nodes[nid].router is not None
                    else None,
                    "quality": {k: float(v) for k, v in sorted(self.nodes[nid].quality.items())},
                    **({"stop_reason": self.nodes[nid].stop_reason}
                       if self.nodes[nid].stop_reason is not None else {}),
                    **({"scored": True} if self.nodes[nid].score is not None else {}),
                    **({"share": float(self.nodes[nid].score.share)}  # type: ignore[union-attr]
                       if self.nodes[nid].score is not None
                       and self.nodes[nid].score.share is not None else {}),
                }
                for nid in order
            ],
        }
        scored = [self.nodes[nid].score for nid in order if self.nodes[nid].score is not None]
        d = self.n_features
        arrays = {
            "means": np.array([self.nodes[nid].mean for nid in order], dtype=dtype).reshape(-1, d),
            "router_weights": np.array(
                [self.nodes[nid].router.weights for nid in internal], dtype=dtype
            ).reshape(-1, 2, d),
            "router_bias": np.array(
                [self.nodes[nid].router.bias for nid in internal], dtype=np.float64
            ).reshape(-1, 2),
        }
        if scored:  # absent from unscored models (and from archives written before scores)
            arrays["score_weights"] = np.array([sc.weights for sc in scored],  # type: ignore[union-attr]
                                               dtype=dtype).reshape(-1, d)
            arrays["score_bias"] = np.array([sc.bias for sc in scored], dtype=np.float64)  # type: ignore[union-attr]
        return manifest, arrays

    @classmethod
    def from_archive(
        cls, manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
    ) -> HierarchyModel:
        """Rebuild a model from :meth:`to_archive` output, validating the schema.

        The archive is data from outside: besides the tree checks of the constructor (one
        root, links consistent both ways, no cycle, every node reachable, true depths), the
        arrays must have exactly one row per node / internal node of the manifest, node ids
        must be distinct and at most :data:`MAX_NODE_ID` (routing allocates a table indexed by
        id), and feature names must be strings. Any violation — or a missing or mistyped
        field — raises :class:`SnapshotFormatError` with a one-line reason.
        """
        check_manifest(
            manifest,
            kind="hierarchy-model",
            schema_version=MODEL_SCHEMA_VERSION,
            what="hierarchy model",
        )
        try:
            means = np.asarray(arrays["means"], dtype=np.float64)
            rw = np.asarray(arrays["router_weights"], dtype=np.float64)
            rb = np.asarray(arrays["router_bias"], dtype=np.float64)
            nodes_meta = manifest["nodes"]
            d = int(manifest["n_features"])
            if not isinstance(nodes_meta, list) or not all(isinstance(m, dict)
                                                           for m in nodes_meta):
                raise SnapshotFormatError("malformed hierarchy model: nodes must be objects")
            ids = [int(meta["id"]) for meta in nodes_meta]
            if len(set(ids)) != len(ids) or not all(0 <= i <= MAX_NODE_ID for i in ids):
                raise SnapshotFormatError(
                    f"malformed hierarchy model: node ids must be distinct, in [0, {MAX_NODE_ID}]"
                )
            n_internal = sum(1 for meta in nodes_meta if meta["children"])
            if (means.shape != (len(ids), d) or rw.shape != (n_internal, 2, d)
                    or rb.shape != (n_internal, 2)):
                raise SnapshotFormatError(
                    f"malformed hierarchy model: {len(ids)} nodes ({n_internal} internal) of "
                    f"{d} features, but arrays means {means.shape}, router_weights "
                    f"{rw.shape}, router_bias {rb.shape}"
                )
            names = manifest.get("feature_names")
            if names is not None and not (isinstance(names, list)
                                          and all(isinstance(n, str) for n in names)):
                raise SnapshotFormatError("malformed hierarchy model: feature_names")
            if manifest["family"] not in FAMILIES:
                raise SnapshotFormatError(
                    f"malformed hierarchy model: family {manifest['family']!r}"
                )
            n_scored = sum(1 for meta in nodes_meta if meta.get("scored"))
            sw = np.asarray(arrays.get("score_weights", np.zeros((0, d))), dtype=np.float64)
            sb = np.asarray(arrays.get("score_bias", np.zeros(0)), dtype=np.float64)
            if sw.shape != (n_scored, d) or sb.shape != (n_scored,):
                raise SnapshotFormatError(
                    f"malformed hierarchy model: {n_scored} scored leaves of {d} features, but "
                    f"arrays score_weights {sw.shape}, score_bias {sb.shape}")
            internal_i = scored_i = 0
            nodes = []
            for row, meta in enumerate(nodes_meta):
                router = score = None
                if meta["children"]:
                    router = Router(rw[internal_i], rb[internal_i], bool(meta["absolute"]))
                    internal_i += 1
                if meta.get("scored"):
                    score = LeafScore(sw[scored_i], float(sb[scored_i]),
                                      read_share(meta.get("share")))
                    scored_i += 1
                nodes.append(
                    TreeNode(
                        node_id=int(meta["id"]),
                        parent=int(meta["parent"]),
                        depth=int(meta["depth"]),
                        weight=float(meta["weight"]),
                        mean=means[row],
                        children=tuple(int(c) for c in meta["children"]),
                        router=router,
                        quality={str(k): float(v) for k, v in meta.get("quality", {}).items()},
                        stop_reason=read_stop_reason(meta),
                        score=score,
                    )
                )
            return cls(
                nodes,
                n_features=d,
                family=manifest["family"],
                method=str(manifest["method"]),
                version=int(manifest["version"]),
                feature_names=names,
                metadata=manifest.get("metadata") or {},
            )
        except SnapshotFormatError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError,
                RecursionError) as exc:
            raise SnapshotFormatError(f"malformed hierarchy model: {exc!r}") from exc

    def to_bytes(self, *, dtype: type = np.float64) -> bytes:
        """Deterministic archive bytes (float32 arrays for a compact models-topic message)."""
        return archive_bytes(*self.to_archive(dtype=dtype))

    @classmethod
    def from_bytes(cls, data: bytes) -> HierarchyModel:
        return cls.from_archive(*read_archive(data))

    def __repr__(self) -> str:
        return (
            f"HierarchyModel(version={self.version}, nodes={len(self.nodes)}, "
            f"leaves={self.n_leaves}, depth={self.max_depth}, d={self.n_features}, "
            f"method={self.method!r}, family={self.family!r})"
        )

    def describe(self, n_top: int = 5) -> str:
        """The tree as indented text, each node with its ``n_top`` most relevant features
        (:func:`streammom.describe.describe_model`); ``print(model)`` shows the same."""
        from streammom.describe import describe_model

        return describe_model(self, n_top=n_top)

    def __str__(self) -> str:
        return self.describe()

    def _repr_html_(self) -> str:
        """Notebook display: the tree as collapsible HTML
        (:func:`streammom.describe.model_html`)."""
        from streammom.describe import model_html

        return model_html(self)


def check_tree(links: Mapping[int, tuple[int, Sequence[int]]]) -> int:
    """The root id of the tree ``{node_id: (parent, children)}``, or :class:`ValueError`.

    A tree has exactly one root (parent < 0); every listed child exists and names its parent
    back; and a walk from the root reaches every node exactly once — so there is no cycle (a
    root that is its own child, two nodes that are each other's child) and no detached node.
    Snapshots are data from outside: they are checked before anything walks the tree.

    >>> check_tree({0: (-1, (1, 2)), 1: (0, ()), 2: (0, ())})
    0
    >>> check_tree({0: (-1, (0, 1)), 1: (0, ())})
    Traceback (most recent call last):
    ...
    ValueError: node 0: child 0 is not linked back
    """
    roots = [nid for nid, (parent, _) in links.items() if parent < 0]
    if len(roots) != 1:
        raise ValueError(f"a tree needs exactly one root, found {len(roots)}")
    root = roots[0]
    seen = {root}
    stack = [root]
    while stack:
        nid = stack.pop()
        for child in links[nid][1]:
            if child not in links or links[child][0] != nid:
                raise ValueError(f"node {nid}: child {child} is not linked back")
            if child in seen:
                raise ValueError(f"node {child} is reached twice: the tree has a cycle")
            seen.add(child)
            stack.append(child)
    if len(seen) != len(links):
        raise ValueError(f"{len(links) - len(seen)} node(s) are not reachable from the root")
    return root


def _node_key(node: TreeNode) -> int:
    return node.node_id
