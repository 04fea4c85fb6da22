"""Batch hierarchical clustering by recursive SIDIWO / D-SIDIWO bisection.

:class:`HierarchicalMoM` builds the binary cluster tree top-down (thesis Alg. 4 = *Hierarchical
Methods of Moments* Alg. 2 for SIDIWO; thesis Alg. 5 for D-SIDIWO): for each node, estimate the
moments on the node's rows (:func:`~streammom.split.moments_from_data`, implicit — M3 is never
formed), compute the 2-way split (:func:`~streammom.split.compute_split`: whitening with the
top-2 eigenpairs of M2, the exact SIDIWO rotation, discriminators or MAP pseudo-centres),
optionally refine it with a 2-component EM (thesis ch. 6 §6.3), route the node's rows and
recurse on each child.

Stopping is data-driven (design §4; thesis digest part 2 §1.7), not only a maximum depth: a node
becomes a leaf when

* it is at ``max_depth`` (the number of split levels: 3 → at most 8 leaves; root depth 0);
* it has fewer than ``min_node_size`` rows;
* M2 has rank < 2 (:class:`~streammom.decompose.NonPositiveEigenvalueError`; stop reason
  ``"rank"``) or the moments are undefined (``"moments"``: e.g. no document with 3 tokens for
  the third-order single-topic estimator);
* the relative eigen-gap of G (``rotation_gap`` ∈ [0, 1]) is below ``min_rotation_gap``: no
  rotation diagonalises the whitened slices, so there is no preferred split;
* the split is one-sided: a child would receive less than ``min_child_fraction`` of the node's
  weight (or no row at all);
* ``max_leaves`` is reached. Nodes are expanded best-first (heaviest first), so when the leaf
  budget binds it is spent on the largest clusters.

The result is canonical: children are ordered heavier first and node ids are assigned in BFS
order (by depth, then parent id, then child order) after the tree is built, so two fits on the
same data give byte-identical :meth:`HierarchyModel.to_bytes`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from streammom._validation import as_csr, as_weights, check_random_state_int
from streammom.base import Estimator
from streammom.decompose import NonPositiveEigenvalueError
from streammom.estimators import (
    FAMILY_OPTIONS,
    Family,
    FamilyOption,
    check_family_data,
    check_third_order,
    moments_from_data,
    normalisers,
    resolve_family,
)
from streammom.model import HierarchyModel, Router, TreeNode
from streammom.params import FLAG, Interval, Options, Param
from streammom.split import Split, compute_split, refine_split_em

__all__ = ["HierarchicalMoM", "NodeInfo"]

StopReason = Literal[
    "max_depth", "min_node_size", "rank", "moments", "short_documents", "rotation_gap",
    "one_sided", "max_leaves",
]


@dataclass(frozen=True)
class NodeInfo:
    """One node of a fitted :class:`HierarchicalMoM` tree (``tree_``), with the split details.

    Internal nodes carry the :class:`~streammom.split.Split` that produced their children
    (router, discriminators D = Oᵀ E†, rotation, whitening, pseudo-centres/EM means, mixing
    weights). ``stop_reason`` says why a leaf was not split (``None`` for internal nodes);
    ``quality`` holds the split-quality signals (see :func:`~streammom.split.compute_split`),
    ``child_share_min`` (the lighter child's share of the node's weight) and ``n_samples``; for
    a leaf whose split was computed but refused, the signals of the refused split.
    """

    node_id: int
    parent: int
    children: tuple[int, ...]
    depth: int
    weight: float
    n_samples: int
    mean: np.ndarray
    split: Split | None = None
    quality: dict[str, float] = field(default_factory=dict)
    stop_reason: StopReason | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def router(self) -> Router | None:
        return None if self.split is None else self.split.router

    @property
    def discriminators(self) -> np.ndarray | None:
        return None if self.split is None else self.split.discriminators


@dataclass
class _Work:
    """A node while the tree is being grown (temporary id = creation order)."""

    tmp_id: int
    parent: int
    depth: int
    rows: np.ndarray
    weight: float
    mean: np.ndarray
    children: list[int] = field(default_factory=list)
    split: Split | None = None
    quality: dict[str, float] = field(default_factory=dict)
    stop_reason: StopReason | None = None


def _has_long_document(X: sp.csr_array, w: np.ndarray) -> bool:
    """Whether a row of positive weight has ≥ 3 tokens (single-topic M3 needs one)."""
    return bool(np.any((np.asarray(X.sum(axis=1)).ravel() >= 3) & (w > 0)))


class HierarchicalMoM(Estimator):
    """Hierarchical clustering with the spectral method of moments (SIDIWO / D-SIDIWO).

    Parameters
    ----------
    max_depth : int, default 3
        Number of split levels (root depth 0; 3 → at most 8 leaves), as in the public code of
        *Hierarchical Methods of Moments* (the thesis counts the root as depth 1).
    method : {"dsidiwo", "sidiwo"}, default "dsidiwo"
        D-SIDIWO routes x to argmax_j |⟨d_j, x⟩| (thesis eq. 6.11); SIDIWO recovers two
        pseudo-centres, projects them (simplex / [0, 1]) and routes by MAP (thesis Alg. 4).
    family : {"auto", "bernoulli", "multinomial"}, default "auto"
        Binary code sets (raw moments, thesis ch. 4/6) or word counts (single-topic unbiased
        estimators, thesis Thm 3.2.1); ``"auto"``: Bernoulli when X is binary, else
        multinomial (:func:`streammom.estimators.resolve_family`), as ``family_``.
    em : bool, default False
        Refine every split with a 2-component EM started from the two children (thesis ch. 6
        §6.3); stops on ‖ΔM‖ < ``em_tol`` or ``em_max_iter`` iterations.
    min_node_size : int, default 10
        Nodes with fewer rows are not split.
    min_rotation_gap : float, default 0.0
        Floor on the relative eigen-gap of G (:attr:`Rotation2.relative_gap`); below it the
        node is a leaf.
    min_child_fraction : float, default 0.01
        A split giving a child less than this share of the node's weight is one-sided and
        refused.
    max_leaves : int or None, default None
        Leaf budget; nodes are expanded heaviest first while it lasts.
    em_tol, em_max_iter : EM stopping rule.
    random_state : int, default 0
        Seed of the Lanczos start vectors (results are deterministic for a given seed).

    Attributes
    ----------
    model_ : HierarchyModel — the fitted tree (routing, relevance, serialisation).
    tree_ : list[NodeInfo] — every node in id (BFS) order with its split and stop reason.
    labels_ : ndarray (n,) — leaf node id of every training row.
    n_leaves_ : int
    n_features_in_ : int

    Examples
    --------
    >>> from streammom.datasets import make_hierarchical_bernoulli
    >>> X, y, _ = make_hierarchical_bernoulli(4_000, 60, 4, codes_per_event=8.0,
    ...                                       random_state=1)
    >>> est = HierarchicalMoM(max_depth=2).fit(X)
    >>> est.n_leaves_, bool((est.predict(X) == est.labels_).all())
    (4, True)
    """

    _parameters = (
        Param("max_depth", 3, (Interval(int, 0, 32),), "split levels below the root"),
        Param("method", "dsidiwo", (Options(("dsidiwo", "sidiwo")),), "split rule"),
        Param("family", "auto", (Options(FAMILY_OPTIONS),),
              "code sets or token counts; auto: bernoulli if X is binary"),
        Param("em", False, (FLAG,), "refine every split with a 2-component EM"),
        Param("min_node_size", 10, (Interval(int, 2, None),), "smaller nodes are not split"),
        Param("min_rotation_gap", 0.0, (Interval(float, 0.0, 1.0),),
              "floor on the relative eigen-gap of G"),
        Param("max_leaves", None, (Interval(int, 1, None), None), "leaf budget"),
        Param("em_tol", 1e-4, (Interval(float, 0.0, None, closed="neither"),),
              "EM stops when the means move less"),
        Param("em_max_iter", 100, (Interval(int, 1, None),), "EM iteration cap"),
        Param("random_state", 0, (Interval(int, 0, None),), "seed of the Lanczos starts"),
        Param("min_child_fraction", 0.01, (Interval(float, 0.0, 0.5, closed="left"),),
              "a split giving a child less than this share is refused"),
    )

    def __init__(
        self,
        max_depth: int = 3,
        method: Literal["dsidiwo", "sidiwo"] = "dsidiwo",
        family: FamilyOption = "auto",
        em: bool = False,
        min_node_size: int = 10,
        min_rotation_gap: float = 0.0,
        max_leaves: int | None = None,
        em_tol: float = 1e-4,
        em_max_iter: int = 100,
        random_state: int = 0,
        min_child_fraction: float = 0.01,
    ) -> None:
        self.max_depth = max_depth
        self.method = method
        self.family = family
        self.em = em
        self.min_node_size = min_node_size
        self.min_rotation_gap = min_rotation_gap
        self.max_leaves = max_leaves
        self.em_tol = em_tol
        self.em_max_iter = em_max_iter
        self.random_state = random_state
        self.min_child_fraction = min_child_fraction

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any = None, *, sample_weight: Any = None) -> HierarchicalMoM:
        """Grow the tree on ``X`` (scipy.sparse or dense, non-negative; n × d).

        ``sample_weight`` (n,) weights every moment sum, node weight and node mean (integer
        weights act like repeated rows). ``y`` is ignored (scikit-learn convention).
        """
        self._validate_params()
        X = as_csr(X)
        n, d = X.shape
        if n < 1:
            raise ValueError("X has no rows")
        if d < 2:
            raise ValueError("X needs at least 2 features")
        w = as_weights(sample_weight, n)
        self.family_: Family = resolve_family(self.family, X)
        if self.family_ == "multinomial":  # as SpectralMixture: a clear error, not one leaf
            check_third_order(self.family_, *normalisers(self.family_, w, X))
        if w.sum() <= 0:
            raise ValueError("sample_weight sums to zero")
        if self.family_ == "bernoulli" and (self.em or self.method == "sidiwo"):
            check_family_data(X, "bernoulli")  # Bernoulli MAP / EM model binary data
        seed = check_random_state_int(self.random_state)

        nodes: list[_Work] = []
        root = self._new_node(nodes, X, w, np.arange(n), parent=-1, depth=0)
        leaf_budget = self.max_leaves if self.max_leaves is not None else np.inf
        n_leaves = 1
        heap: list[tuple[float, int]] = [(-root.weight, root.tmp_id)]
        while heap:
            _, tmp = heapq.heappop(heap)
            node = nodes[tmp]
            if node.depth >= self.max_depth:
                node.stop_reason = "max_depth"
                continue
            if node.rows.size < self.min_node_size:
                node.stop_reason = "min_node_size"
                continue
            if n_leaves >= leaf_budget:
                node.stop_reason = "max_leaves"
                continue
            sides = self._try_split(node, X, w, seed)
            if sides is None:
                continue
            for rows in sides:
                child = self._new_node(nodes, X, w, rows, parent=node.tmp_id,
                                       depth=node.depth + 1)
                node.children.append(child.tmp_id)
                heapq.heappush(heap, (-child.weight, child.tmp_id))
            n_leaves += 1

        self._finalise(nodes, n, d)
        return self

    def _new_node(
        self, nodes: list[_Work], X: sp.csr_array, w: np.ndarray, rows: np.ndarray,
        *, parent: int, depth: int,
    ) -> _Work:
        wn = w[rows]
        weight = float(wn.sum())
        Xn = X[rows]
        mean = (wn @ Xn) / weight if weight > 0 else np.zeros(X.shape[1])
        node = _Work(len(nodes), parent, depth, rows, weight, np.asarray(mean, dtype=float))
        nodes.append(node)
        return node

    def _try_split(
        self, node: _Work, X: sp.csr_array, w: np.ndarray, seed: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Split one node, or record why it stays a leaf (returns the two children's rows)."""
        Xn = X[node.rows]
        wn = w[node.rows]
        try:
            moments = moments_from_data(Xn, wn, family=self.family_)
            split = compute_split(moments, family=self.family_, method=self.method,
                                  random_state=seed)
        except NonPositiveEigenvalueError:
            node.stop_reason = "rank"
            return None
        except ValueError:  # undefined moments (zero weight, documents with < 3 tokens)
            short = self.family_ == "multinomial" and not _has_long_document(Xn, wn)
            node.stop_reason = "short_documents" if short else "moments"
            return None
        quality = {k: float(v) for k, v in split.quality.items()}
        if quality["rotation_gap"] < self.min_rotation_gap:
            node.quality = quality
            node.stop_reason = "rotation_gap"
            return None
        if self.em:
            split = refine_split_em(split, Xn, family=self.family_, weights=wn,
                                    tol=self.em_tol, max_iter=self.em_max_iter)
            quality = {k: float(v) for k, v in split.quality.items()}
        go_right = split.router.side(Xn) == 1
        share = np.array([wn[~go_right].sum(), wn[go_right].sum()])
        counts = np.array([np.count_nonzero(~go_right), np.count_nonzero(go_right)])
        if share[1] > share[0]:  # canonical order: heavier child first
            split = split.swapped()
            # route again, not ~go_right: a tie (s₀ = s₁) goes to child 0 under either router
            go_right = split.router.side(Xn) == 1
            share = np.array([wn[~go_right].sum(), wn[go_right].sum()])
            counts = np.array([np.count_nonzero(~go_right), np.count_nonzero(go_right)])
        quality["child_share_min"] = float(share[1] / node.weight) if node.weight > 0 else 0.0
        node.quality = quality
        if counts.min() == 0 or share[1] < self.min_child_fraction * node.weight:
            node.stop_reason = "one_sided"
            return None
        node.split = split
        return node.rows[~go_right], node.rows[go_right]

    def _finalise(self, nodes: list[_Work], n: int, d: int) -> None:
        """Renumber in BFS order, build ``model_``, ``tree_`` and ``labels_``."""
        order: list[int] = []
        frontier = [0]
        while frontier:  # BFS: level by level, parents in id order, children in canonical order
            order.extend(frontier)
            frontier = [c for t in frontier for c in nodes[t].children]
        new_id = {tmp: i for i, tmp in enumerate(order)}
        tree: list[NodeInfo] = []
        model_nodes: list[TreeNode] = []
        labels = np.full(n, -1, dtype=np.int64)
        for tmp in order:
            node = nodes[tmp]
            nid = new_id[tmp]
            parent = new_id[node.parent] if node.parent >= 0 else -1
            children = tuple(new_id[c] for c in node.children)
            quality = dict(node.quality)
            quality["n_samples"] = float(node.rows.size)
            tree.append(NodeInfo(nid, parent, children, node.depth, node.weight,
                                 int(node.rows.size), node.mean,
                                 node.split if children else None, quality,
                                 None if children else node.stop_reason))
            model_nodes.append(TreeNode(
                node_id=nid, parent=parent, depth=node.depth, weight=node.weight,
                mean=node.mean, children=children,
                router=node.split.router if children else None,
                quality=quality if children else {"n_samples": float(node.rows.size)},
                stop_reason=None if children else node.stop_reason,
            ))
            if not children:
                labels[node.rows] = nid
        self.model_ = HierarchyModel(
            model_nodes, n_features=d, family=self.family_, method=self.method,
            metadata={"estimator": "HierarchicalMoM",
                      "params": {k: _jsonable(v) for k, v in self.get_params().items()}},
        )
        self.tree_ = tree
        self.labels_ = labels
        self.n_leaves_ = self.model_.n_leaves
        self.n_features_in_ = d

    # ------------------------------------------------------------------ inference
    def _check_fitted(self) -> None:
        if not hasattr(self, "model_"):
            raise RuntimeError("this HierarchicalMoM instance is not fitted yet; call fit()")

    def predict(self, X: Any) -> np.ndarray:
        """Leaf node id of every row of ``X`` (routing root → leaf with the fitted routers)."""
        self._check_fitted()
        return self.model_.predict(as_csr(X, self.n_features_in_))

    def fit_predict(self, X: Any, y: Any = None, *, sample_weight: Any = None) -> np.ndarray:
        """Fit and return ``labels_``."""
        return self.fit(X, sample_weight=sample_weight).labels_

    @property
    def leaf_ids_(self) -> tuple[int, ...]:
        """Ids of the leaves (the values ``predict`` returns), ascending."""
        self._check_fitted()
        return self.model_.leaf_ids


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value
