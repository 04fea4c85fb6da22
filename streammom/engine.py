"""The streaming hierarchy engine: learn / assign / refit / snapshot (design §3, §5).

:class:`StreamingHierarchy` keeps one :class:`~streammom.moments.MomentAccumulator` and one
:class:`~streammom.reservoir.Reservoir` per node of a binary tree and publishes the current
routing model as an immutable :class:`~streammom.model.HierarchyModel` (``model_``).

Hot path (``learn``), per batch, with no per-event Python loop:

1. route the batch root → leaf with ``model_`` (one compiled walk, only the routers on each
   row's path are scored);
2. sort rows by the DFS rank of their leaf, so every node's rows are one contiguous slice;
3. per node with rows in the batch: reservoir offers, then W, s (and T1–T3) and T in the
   node's own basis from one compiled pass over its slice
   (:meth:`~streammom.moments.MomentAccumulator.add_rows`, the node's T stays in cache); C
   only at leaves — an internal node's C is its frozen offset plus its children's C
   (design §3);
4. run the refit policy (every ``refit_every`` events and/or ``refit_every_seconds`` of event
   time, never wall-clock, so runs are reproducible).

Decay is exact exponential forgetting with a lazy global scale: an event at time τ is stored with
weight w·2^((τ − τ_ref)/H), so nothing is rescaled per batch; the true (decayed) sums are the
stored ones times 2^(−(now − τ_ref)/H). Moments are ratios of sums, so the scale cancels; only
absolute thresholds (``min_split_weight``) use it. The stored sums are renormalised (τ_ref ← now)
when the exponent grows past 64 — exact up to rounding.

``refit()`` works top-down (design §5): each internal node whose sums changed enough recomputes
its split (``compute_split`` with the previous discriminators as reference, so child order and
ids stay stable); if the new router sends more than ``resplit_threshold`` of the node's
reservoir to the other child, the subtree is rebuilt from the reservoir ("re-split"); a child
whose decayed weight fell below ``prune_fraction`` of its parent's is merged back ("prune");
then leaves heavy enough split when depth, leaf budget and split quality allow ("split").
Children start from the parent's reservoir routed by the new split and scaled to the parent's
weight. Every change bumps ``model_version_`` and appends lineage records.

Refit cost is bounded and does not grow with the stream: internal C's are assembled bottom-up
only where needed (one add per node); the top eigenpairs of M2 come from a block Krylov–
Rayleigh–Ritz solve warm-started from the node's tracked basis (C unpacked once into a float32
matrix, then a few ``sgemm`` products, never a d×d eigendecomposition; residuals ≤ 1e-3·θ₁,
well inside the ``basis_tol`` the tracked basis tolerates); ``compute_split`` then gets M2 as
a :class:`~streammom.decompose.KnownSpectrumOperator` carrying exactly those eigenpairs (no
second solve); the basis is rebased only when the
top-2 eigenvectors leave its span; a new child's basis is a few block Krylov steps on its
reservoir rows from the parent's basis; the d(d+1)/2 temporaries of a refit come from a small
pool of reused buffers; and a node is refit only after new weight ≥ f × its weight, f doubling
after every refit that barely moved its router (capped, reset on change).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streammom._buffers import PackedBufferPool
from streammom._validation import as_csr, as_weights, check_random_state_int
from streammom.decompose import KnownSpectrumOperator, top_eigenpairs
from streammom.model import (
    MAX_NODE_ID,
    HierarchyModel,
    Router,
    Routing,
    TreeNode,
    check_tree,
)
from streammom.moments import (
    MomentAccumulator,
    SymmetricMatrix,
    packed_size,
    row_sums,
)
from streammom.reservoir import Reservoir
from streammom.serialization import (
    DEFAULT_MAX_BYTES,
    SnapshotFormatError,
    archive_bytes,
    check_manifest,
    read_archive,
)
from streammom.split import NodeMoments, Split, compute_split
from streammom.vocab import Vocabulary

__all__ = ["ENGINE_SCHEMA_VERSION", "StreamingHierarchy", "warm_up"]

ENGINE_SCHEMA_VERSION = 1
_RENORM_EXPONENT = 64.0
_SPARSE_BASIS_MIN_ROWS = 4
_EIG_TOL = 1e-3
_EIG_WARM_ITER = 40
_EIG_COLD_ITER = 200
_CHILD_BASIS_ITER = 8


@dataclass
class _Node:
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
    backoff: int = 0  # consecutive stable refits (each doubles the new-weight fraction needed)
    born_version: int = 0

    @property
    def is_leaf(self) -> bool:
        return not self.children


def _looks_like_events(X: Any) -> bool:
    """Raw events (token lists / count dicts) rather than a matrix-like batch."""
    if not isinstance(X, list | tuple) or not X:
        return False
    first = X[0]
    if isinstance(first, Mapping):
        return True
    return isinstance(first, list | tuple) and (not first or isinstance(first[0], str))


def _router_side(router: Router, X: sp.csr_array) -> np.ndarray:
    """0/1 child of every row under one router (same rule as HierarchyModel.route)."""
    scores = np.asarray(X @ router.weights.T) + router.bias
    if router.absolute:
        scores = np.abs(scores)
    return (scores[:, 1] > scores[:, 0]).astype(np.int64)


def _complete_basis(V: np.ndarray, m: int, d: int, seed: int) -> np.ndarray:
    """Orthonormalise V (d × ≤m) and pad it to m columns with a seeded complement."""
    Q, _ = np.linalg.qr(V) if V.shape[1] else (np.zeros((d, 0)), None)
    if Q.shape[1] >= m:
        return np.ascontiguousarray(Q[:, :m])
    extra = np.random.default_rng(seed).standard_normal((d, m - Q.shape[1]))
    extra -= Q @ (Q.T @ extra)
    Q2, _ = np.linalg.qr(extra)
    return np.ascontiguousarray(np.hstack([Q, Q2]))


def _block_krylov_top(
    matmul: Any, V: np.ndarray, *, k: int, tol: float, max_iter: int
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Top eigenpairs by Rayleigh–Ritz on span[V, AV], iterated (a block Davidson step).

    Returns (values desc, vectors, converged) for the p = V.shape[1] leading Ritz pairs:
    converged once the k leading residuals ‖A u − θ u‖ are ≤ tol·|θ₁|, else the last iterate
    after ``max_iter`` iterations. One product with p columns per iteration (A V is carried
    over); deterministic.
    """
    p = V.shape[1]
    AV = matmul(V)
    for _ in range(max_iter):
        Wd = AV - V @ (V.T @ AV)
        Wd -= V @ (V.T @ Wd)
        Wq, _ = np.linalg.qr(Wd)
        AW = matmul(Wq)
        K = np.hstack([V, Wq])
        AK = np.hstack([AV, AW])
        H = K.T @ AK
        theta, Y = np.linalg.eigh((H + H.T) / 2.0)
        order = np.argsort(theta)[::-1][:p]
        theta, Y = theta[order], Y[:, order]
        V, AV = K @ Y, AK @ Y
        R = AV[:, :k] - V[:, :k] * theta[:k]
        scale = max(abs(float(theta[0])), np.finfo(float).tiny)
        if float(np.max(np.linalg.norm(R, axis=0))) <= tol * scale:
            return theta, V, True
    return theta, V, False


class StreamingHierarchy:
    """Streaming hierarchical clustering with the spectral method of moments (design §5).

    Parameters
    ----------
    n_features:
        Dimension d (inferred from the first batch, or from ``vocabulary``, when None).
    vocabulary:
        Optional :class:`~streammom.vocab.Vocabulary`; ``learn``/``assign`` then also accept
        raw events (token lists or count dicts), and snapshots include it.
    max_depth, max_leaves, min_split_weight:
        A leaf splits only when its depth < ``max_depth``, the tree has < ``max_leaves`` leaves
        and its decayed weight ≥ ``min_split_weight`` (and the split quality allows, below).
    half_life, half_life_unit:
        Exponential forgetting: an event's weight halves every ``half_life`` events or seconds
        of event time (``timestamps`` required for seconds). None: no forgetting.
    refit_every, refit_every_seconds:
        Refit policy: after the batch in which this many events (or event-time seconds) passed
        since the last refit. None disables a trigger; ``refit()`` can always be called.
    reservoir_size:
        Events kept per node (the bounded sample children and repairs start from).
    basis_dim:
        m, the dimension of the tracked third-order basis (oversampling the top-2 eigenspace).
    method, family:
        ``"dsidiwo"`` or ``"sidiwo"``; ``"bernoulli"`` (code sets, raw moments) or
        ``"multinomial"`` (token counts, single-topic estimators).
    random_state:
        Integer seed of every random choice (reservoirs, eigensolver starts).
    refit_min_new_fraction, refit_max_new_fraction, stable_share:
        A node is refit only after receiving new weight ≥ f × its weight, where f starts at
        ``refit_min_new_fraction`` and doubles after every refit that re-routed at most
        ``stable_share`` of the node's reservoir (capped at ``refit_max_new_fraction``; reset by
        any larger change). Under decay the cap bounds the reaction time to about
        log2(1/(1 − cap)) half-lives of the node's own events.
    resplit_threshold:
        Share of a node's reservoir that must change child under the recomputed router for
        the subtree to be rebuilt (below it the router is updated in place).
    prune_fraction:
        A node's children are merged back when one has < this fraction of the node's weight.
    min_child_fraction, min_rotation_gap, min_spectral_gap:
        Split quality floors: each child's share of the reservoir, the relative eigen-gap of G
        (``rotation_gap``) and (λ₂ − λ₃)/λ₁ of M2 (design §4 "split quality").
    basis_tol:
        Rebase when ‖E† − E†PPᵀ‖/‖E†‖ exceeds this (design §3 "basis drift").
    min_reservoir_split:
        Reservoir rows a node needs before it may split.
    max_lineage:
        Lineage records kept in ``lineage_`` (oldest dropped).
    chunk_size:
        Rows per hot-path chunk (bounds temporary memory).
    """

    def __init__(
        self,
        n_features: int | None = None,
        vocabulary: Vocabulary | None = None,
        *,
        max_depth: int = 4,
        max_leaves: int = 16,
        min_split_weight: float = 500.0,
        half_life: float | None = None,
        half_life_unit: Literal["events", "seconds"] = "events",
        refit_every: int | None = 10_000,
        refit_every_seconds: float | None = None,
        reservoir_size: int = 1024,
        basis_dim: int = 8,
        method: Literal["dsidiwo", "sidiwo"] = "dsidiwo",
        family: Literal["bernoulli", "multinomial"] = "bernoulli",
        random_state: int = 0,
        refit_min_new_fraction: float = 0.1,
        refit_max_new_fraction: float = 0.25,
        stable_share: float = 0.02,
        resplit_threshold: float = 0.25,
        prune_fraction: float = 0.02,
        min_child_fraction: float = 0.05,
        min_rotation_gap: float = 0.0,
        min_spectral_gap: float = 0.0,
        basis_tol: float = 0.05,
        min_reservoir_split: int = 32,
        max_lineage: int = 10_000,
        chunk_size: int = 32_768,
    ) -> None:
        self.vocabulary = vocabulary
        if vocabulary is not None:
            if n_features is not None and int(n_features) != vocabulary.n_features:
                raise ValueError("n_features does not match the vocabulary's n_features")
            n_features = vocabulary.n_features
        self.max_depth = int(max_depth)
        self.max_leaves = int(max_leaves)
        self.min_split_weight = float(min_split_weight)
        self.half_life = None if half_life is None else float(half_life)
        self.half_life_unit = half_life_unit
        self.refit_every = None if refit_every is None else int(refit_every)
        self.refit_every_seconds = (
            None if refit_every_seconds is None else float(refit_every_seconds)
        )
        self.reservoir_size = int(reservoir_size)
        self.basis_dim = int(basis_dim)
        self.method = method
        self.family = family
        self.random_state = check_random_state_int(random_state)
        self.refit_min_new_fraction = float(refit_min_new_fraction)
        self.refit_max_new_fraction = float(refit_max_new_fraction)
        self.stable_share = float(stable_share)
        self.resplit_threshold = float(resplit_threshold)
        self.prune_fraction = float(prune_fraction)
        self.min_child_fraction = float(min_child_fraction)
        self.min_rotation_gap = float(min_rotation_gap)
        self.min_spectral_gap = float(min_spectral_gap)
        self.basis_tol = float(basis_tol)
        self.min_reservoir_split = int(min_reservoir_split)
        self.max_lineage = int(max_lineage)
        self.chunk_size = int(chunk_size)
        self._validate_config()

        self.n_features_: int | None = None
        self.nodes_: dict[int, _Node] = {}
        self.root_id_ = 0
        self.model_: HierarchyModel | None = None
        self.model_version_ = 0
        self.lineage_: list[dict[str, Any]] = []
        self.n_events_seen_ = 0
        self.last_refit_duration_ = 0.0
        self.last_refit_time_: float | None = None
        self.n_rebases_ = 0
        self.n_refits_ = 0
        self._next_id = 1
        self._batch_counter = 0
        self._events_since_refit = 0
        self._time_ref: float | None = None
        self._clock: float | None = None
        self._refit_clock: float | None = None
        if n_features is not None:
            self._init_tree(int(n_features))

    # ------------------------------------------------------------------ config
    _CONFIG_KEYS = (
        "max_depth", "max_leaves", "min_split_weight", "half_life", "half_life_unit",
        "refit_every", "refit_every_seconds", "reservoir_size", "basis_dim", "method", "family",
        "random_state", "refit_min_new_fraction", "refit_max_new_fraction", "stable_share",
        "resplit_threshold", "prune_fraction",
        "min_child_fraction", "min_rotation_gap", "min_spectral_gap", "basis_tol",
        "min_reservoir_split", "max_lineage", "chunk_size",
    )

    def get_config(self) -> dict[str, Any]:
        """The constructor keywords (JSON-able), as stored in snapshots."""
        return {k: getattr(self, k) for k in self._CONFIG_KEYS}

    def _validate_config(self) -> None:
        if self.max_depth < 0 or self.max_leaves < 1:
            raise ValueError("max_depth must be ≥ 0 and max_leaves ≥ 1")
        if self.min_split_weight < 0:
            raise ValueError("min_split_weight must be non-negative")
        if self.half_life is not None and not (math.isfinite(self.half_life)
                                               and self.half_life > 0):
            raise ValueError("half_life must be positive")
        if self.half_life_unit not in ("events", "seconds"):
            raise ValueError("half_life_unit must be 'events' or 'seconds'")
        if self.refit_every is not None and self.refit_every < 1:
            raise ValueError("refit_every must be ≥ 1 or None")
        if self.refit_every_seconds is not None and not self.refit_every_seconds > 0:
            raise ValueError("refit_every_seconds must be positive or None")
        if self.reservoir_size < 2:
            raise ValueError("reservoir_size must be ≥ 2")
        if self.basis_dim < 2:
            raise ValueError("basis_dim must be ≥ 2")
        if self.method not in ("dsidiwo", "sidiwo"):
            raise ValueError(f"method must be 'dsidiwo' or 'sidiwo', got {self.method!r}")
        if self.family not in ("bernoulli", "multinomial"):
            raise ValueError(f"family must be 'bernoulli' or 'multinomial', got {self.family!r}")
        if not 0 <= self.resplit_threshold <= 1 or not 0 <= self.prune_fraction < 0.5:
            raise ValueError("resplit_threshold must be in [0, 1], prune_fraction in [0, 0.5)")
        if not 0 <= self.min_child_fraction < 0.5:
            raise ValueError("min_child_fraction must be in [0, 0.5)")
        if not (self.refit_min_new_fraction >= 0 and self.refit_max_new_fraction >= 0
                and 0 <= self.stable_share <= 1):
            raise ValueError("refit fractions must be ≥ 0 and stable_share in [0, 1]")
        if self.chunk_size < 1 or self.max_lineage < 0:
            raise ValueError("chunk_size must be ≥ 1 and max_lineage ≥ 0")

    # ------------------------------------------------------------------ tree helpers
    def _new_node(self, node_id: int, parent: int, depth: int) -> _Node:
        """A node with empty sums; its C (d(d+1)/2 zeros) comes from the buffer pool."""
        assert self.n_features_ is not None
        acc = MomentAccumulator(self.n_features_, family=self.family, second_order=False)
        acc.C = self._pool().zeros()
        return _Node(
            node_id=node_id,
            parent=parent,
            depth=depth,
            acc=acc,
            reservoir=Reservoir(self.reservoir_size, self.n_features_),
            born_version=self.model_version_,
        )

    def _init_tree(self, d: int) -> None:
        if d < 2:
            raise ValueError("n_features must be ≥ 2")
        self.n_features_ = d
        self.nodes_ = {0: self._new_node(0, -1, 0)}
        self.root_id_ = 0
        self._rebuild_model()

    def _scale(self) -> float:
        """Factor turning stored sums into true (decayed) sums now."""
        if self.half_life is None or self._time_ref is None or self._clock is None:
            return 1.0
        return float(np.exp2(-(self._clock - self._time_ref) / self.half_life))

    def _subtree(self, node_id: int) -> list[int]:
        out, stack = [], [node_id]
        while stack:
            v = stack.pop()
            out.append(v)
            stack.extend(reversed(self.nodes_[v].children))
        return out

    def _dfs(self) -> list[int]:
        return self._subtree(self.root_id_)

    def _rebuild_model(self) -> None:
        """Publish the current tree as an immutable HierarchyModel; refresh grouping tables."""
        assert self.n_features_ is not None
        scale = self._scale()
        nodes = []
        for nid in self._dfs():
            v = self.nodes_[nid]
            nodes.append(
                TreeNode(
                    node_id=nid,
                    parent=v.parent,
                    depth=v.depth,
                    weight=float(v.acc.weight * scale),
                    mean=v.acc.first_moment(),
                    children=tuple(v.children),
                    router=v.router,
                    quality=dict(v.quality),
                )
            )
        names = self.vocabulary.feature_names if self.vocabulary is not None else None
        self.model_ = HierarchyModel(
            nodes,
            n_features=self.n_features_,
            family=self.family,
            method=self.method,
            version=self.model_version_,
            feature_names=names,
            metadata={"engine": "StreamingHierarchy", "n_events_seen": self.n_events_seen_},
        )
        # DFS leaf ranks: every node's rows are one contiguous slice after sorting by rank.
        order = self._dfs()
        leaves = [nid for nid in order if self.nodes_[nid].is_leaf]
        rank = np.full(max(self.nodes_) + 1, -1, dtype=np.int64)
        rank[leaves] = np.arange(len(leaves))
        self._leaf_rank = rank
        self._n_leaves = len(leaves)
        span: dict[int, tuple[int, int]] = {}
        for nid in reversed(order):
            v = self.nodes_[nid]
            if v.is_leaf:
                r = int(rank[nid])
                span[nid] = (r, r + 1)
            else:
                span[nid] = (span[v.children[0]][0], span[v.children[-1]][1])
        self._spans = [(nid, span[nid][0], span[nid][1]) for nid in order]

    # ------------------------------------------------------------------ input
    def _as_matrix(self, X: Any) -> sp.csr_array:
        if self.vocabulary is not None and _looks_like_events(X):
            X = self.vocabulary.transform(X, binary=self.family == "bernoulli")
        X = as_csr(X, self.n_features_)
        X.eliminate_zeros()
        if self.n_features_ is None:
            self._init_tree(X.shape[1])
        return X

    def _check_timestamps(self, timestamps: Any, n: int) -> np.ndarray | None:
        if timestamps is None:
            if self.half_life is not None and self.half_life_unit == "seconds" and n:
                raise ValueError("half_life_unit='seconds' needs timestamps")
            return None
        ts = np.asarray(timestamps, dtype=np.float64).ravel()
        if ts.shape != (n,):
            raise ValueError(f"timestamps has shape {ts.shape}, expected ({n},)")
        if not np.isfinite(ts).all():
            raise ValueError("timestamps must be finite")
        return ts

    def _stored_weights(self, w: np.ndarray, ts: np.ndarray | None) -> np.ndarray:
        """Event weights in the lazily scaled units of the sums (and advance the clock)."""
        n = w.size
        if self.half_life is None or self.half_life_unit == "seconds":
            tau = ts
        else:
            tau = self.n_events_seen_ + np.arange(n, dtype=np.float64)
        if tau is None:
            return w
        top = float(tau.max())
        self._clock = top if self._clock is None else max(self._clock, top)
        if self._refit_clock is None:
            self._refit_clock = float(tau.min())
        if self.half_life is None:
            return w
        if self._time_ref is None:
            self._time_ref = float(tau[0])
        expo = (tau - self._time_ref) / self.half_life
        if float(expo.max()) > _RENORM_EXPONENT:
            self._renormalise(top)
            expo = (tau - self._time_ref) / self.half_life
        return w * np.exp2(expo)

    def _renormalise(self, new_ref: float) -> None:
        """Rescale every stored sum to the reference time ``new_ref`` (exact up to rounding)."""
        assert self.half_life is not None and self._time_ref is not None
        factor = float(np.exp2(-(new_ref - self._time_ref) / self.half_life))
        for v in self.nodes_.values():
            v.acc.decay(factor)
            v.fresh *= factor
        self._time_ref = new_ref

    # ------------------------------------------------------------------ public API
    def learn(self, X: Any, weights: Any = None, timestamps: Any = None) -> Routing:
        """Route with the current model, add the batch to the sums on its paths, run the policy.

        Returns the routing of the batch (leaf, path, margins, model version used).
        """
        X = self._as_matrix(X)
        n = X.shape[0]
        w = as_weights(weights, n)
        ts = self._check_timestamps(timestamps, n)
        assert self.model_ is not None
        routing = self.model_.route(X, check_input=False)
        if n:
            stored = self._stored_weights(w, ts)
            for start in range(0, n, self.chunk_size):
                stop = min(start + self.chunk_size, n)
                self._accumulate(X[start:stop] if (start or stop < n) else X,
                                 stored[start:stop], routing.leaf_ids[start:stop])
            self.n_events_seen_ += n
            self._events_since_refit += n
        if self._refit_due():
            self.refit()
        return routing

    def partial_fit(self, X: Any, weights: Any = None, timestamps: Any = None
                    ) -> StreamingHierarchy:
        """:meth:`learn` without the routing (scikit-learn style); returns self."""
        self.learn(X, weights=weights, timestamps=timestamps)
        return self

    def assign(self, X: Any) -> Routing:
        """Route without learning: leaf, path, margins and model version per row."""
        X = self._as_matrix(X)
        assert self.model_ is not None
        return self.model_.route(X, check_input=False)

    def predict(self, X: Any) -> np.ndarray:
        """Leaf id of every row under the current model."""
        return self.assign(X).leaf_ids

    def _refit_due(self) -> bool:
        if self.refit_every is not None and self._events_since_refit >= self.refit_every:
            return True
        return bool(
            self.refit_every_seconds is not None
            and self._clock is not None
            and self._refit_clock is not None
            and self._clock - self._refit_clock >= self.refit_every_seconds
        )

    # ------------------------------------------------------------------ hot path
    def _accumulate(self, X: sp.csr_array, w: np.ndarray, leaf_ids: np.ndarray) -> None:
        """Add a routed chunk to every node on its paths (design §3, §5).

        Rows are sorted by leaf (DFS rank), so every node's rows are one contiguous slice. Per
        node: reservoir offers (with the weight before the chunk), then W, s, T1–T3 and T from
        one compiled pass over the slice; C only at leaves.
        """
        rank = self._leaf_rank[leaf_ids]
        # Leaf ranks are small: an 8- or 16-bit key makes numpy's stable sort a radix sort, O(n).
        key = rank.astype(np.uint8 if self._n_leaves <= 256 else
                          np.int16 if self._n_leaves <= 32767 else np.int64)
        perm = np.argsort(key, kind="stable")
        Xs = X[perm]
        Xs.has_sorted_indices = True
        ws = w[perm]
        bounds = np.searchsorted(rank[perm], np.arange(self._n_leaves + 1), side="left")
        lengths = row_sums(Xs) if self.family == "multinomial" else None
        batch = self._batch_counter
        self._batch_counter += 1
        for nid, r0, r1 in self._spans:
            a, b = int(bounds[r0]), int(bounds[r1])
            if a == b:
                continue
            v = self.nodes_[nid]
            wv = ws[a:b]
            v.fresh += float(wv.sum())
            rng = np.random.default_rng([self.random_state, nid, batch])
            v.reservoir.offer(Xs, wv, v.acc.weight, rng, start=a)
            v.acc.add_rows(Xs, ws, a, b, second=v.is_leaf, lengths=lengths)

    # ------------------------------------------------------------------ refit
    def _weight_true(self, v: _Node) -> float:
        return v.acc.weight * self._scale()

    def node_accumulator(self, node_id: int) -> MomentAccumulator:
        """A copy of a node's sums in true (decayed) units, with its full C assembled.

        An internal node's C is its frozen offset plus its descendants' C (design §3).
        """
        v = self.nodes_[node_id]
        out = v.acc.copy()
        out.C = self._full_second(node_id).copy()
        out.decay(self._scale())
        return out

    def _full_second(self, nid: int) -> np.ndarray:
        """The packed C of a node: its own array (leaf) or offset + descendants' (design §3)."""
        v = self.nodes_[nid]
        assert v.acc.C is not None
        if v.is_leaf:
            return v.acc.C
        out = v.acc.C.copy()
        for desc in self._subtree(nid)[1:]:
            c = self.nodes_[desc].acc.C
            assert c is not None
            out += c
        return out

    def _eig_seed(self, nid: int, salt: int = 0) -> int:
        return int(np.random.default_rng([self.random_state, nid, salt, 7]).integers(2**31))

    def _basis_from_m2(self, M2: np.ndarray | spla.LinearOperator, nid: int) -> np.ndarray:
        assert self.n_features_ is not None
        d = self.n_features_
        m = min(self.basis_dim, d)
        if isinstance(M2, np.ndarray) and m >= d - 1:
            _, vecs = top_eigenpairs(M2, m)
        else:
            _, vecs = top_eigenpairs(M2, m, random_state=self._eig_seed(nid))
        return _complete_basis(vecs, m, d, self._eig_seed(nid, 1))

    def _basis_from_rows(
        self, X: sp.csr_array, nid: int, start: np.ndarray | None = None
    ) -> np.ndarray:
        """Top-m eigenvectors of the M2 estimated from reservoir rows (cheap sparse operator).

        ``start`` (the parent's basis for a new child) warm-starts a few block Krylov steps
        (:meth:`_warm_krylov`, at most ``_CHILD_BASIS_ITER``); each product costs O(nnz(X)·m).
        """
        assert self.n_features_ is not None
        d = self.n_features_
        m = min(self.basis_dim, d)
        n = X.shape[0]
        colsum = np.asarray(X.sum(axis=0)).ravel()
        correct = self.family == "multinomial"
        try:
            if d <= 400:
                G = (X.T @ X).toarray()
                if correct:
                    G[np.diag_indices_from(G)] -= colsum
                return self._basis_from_m2(G, nid)
            if n < _SPARSE_BASIS_MIN_ROWS * m:
                _, _, vt = np.linalg.svd(X.toarray(), full_matrices=False)
                return _complete_basis(vt[:m].T, m, d, self._eig_seed(nid, 1))

            Xt = X.T  # built once: the solver calls matvec many times

            def matvec(v: np.ndarray) -> np.ndarray:
                v2 = np.asarray(v).reshape(d, -1)
                out = Xt @ (X @ v2)
                if correct:
                    out = out - colsum[:, None] * v2
                return np.asarray(out).reshape(np.shape(v))

            # A starting basis only: T is filled from these same rows for any P, and the
            # child's first refit rebases if its top eigenspace is elsewhere (design §3).
            _, vecs, _ = self._warm_krylov(matvec, d, m, start, nid, _CHILD_BASIS_ITER)
            return _complete_basis(vecs[:, :m], m, d, self._eig_seed(nid, 1))
        except (spla.ArpackNoConvergence, spla.ArpackError, np.linalg.LinAlgError):
            _, _, vt = np.linalg.svd(X.toarray(), full_matrices=False)
            return _complete_basis(vt[:m].T, m, d, self._eig_seed(nid, 1))

    def _scratch(self, d: int) -> np.ndarray:
        """A d×d work buffer reused by the refits (avoids page-faulting 8d² fresh bytes)."""
        buf = getattr(self, "_scratch_buf", None)
        if buf is None or buf.shape != (d, d):
            buf = np.zeros((d, d), dtype=np.float32)
            self._scratch_buf = buf
        return buf

    def _warm_krylov(
        self, matmul: Any, d: int, p: int, start: np.ndarray | None, nid: int, max_iter: int
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """:func:`_block_krylov_top` for the top 2 of p from ``start`` (padded to p columns with
        a seeded complement; a seeded random block when None)."""
        V0 = np.zeros((d, 0)) if start is None else start[:, :p]
        return _block_krylov_top(matmul, _complete_basis(V0, p, d, self._eig_seed(nid, 3)),
                                 k=min(2, p), tol=_EIG_TOL, max_iter=max_iter)

    def _top_eigenpairs(
        self, matmul: Any, d: int, p: int, start: np.ndarray | None, nid: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-p eigenpairs of a symmetric operator, warm-started from the node's basis.

        Small d: dense ``eigh``. Otherwise block Krylov–Rayleigh–Ritz on [V, AV] from the
        tracked basis (top-m eigenvectors of the last refit), so a refit costs a few products
        with C instead of a cold Lanczos run; ARPACK is the fallback if it does not converge.
        """
        if d <= max(64, 4 * p):
            M = matmul(np.eye(d))
            vals, vecs = np.linalg.eigh((M + M.T) / 2.0)
            return vals[::-1][:p].copy(), np.ascontiguousarray(vecs[:, ::-1][:, :p])
        vals, vecs, ok = self._warm_krylov(
            matmul, d, p, start, nid, _EIG_WARM_ITER if start is not None else _EIG_COLD_ITER)
        if ok:
            return vals, vecs
        op = spla.LinearOperator((d, d), matvec=matmul, matmat=matmul, dtype=np.float64)
        return top_eigenpairs(op, p, random_state=self._eig_seed(nid))

    def _node_split(
        self, v: _Node, C: np.ndarray, reference: np.ndarray | None
    ) -> Split | None:
        """Compute the split of a node from its sums, maintaining its tracked basis (design §3).

        The top eigenpairs of M2 come from :meth:`_top_eigenpairs` (warm start); if the top-2
        eigenvectors left span(P) beyond ``basis_tol`` the basis moves to the current top-m and
        T is rotated and repaired from the reservoir. ``compute_split`` then receives M2 as a
        cheap operator with exactly those eigenpairs (so its own eigensolve is nearly free).
        """
        acc = v.acc
        if acc.weight <= 0 or (self.family == "multinomial" and (acc.t2 <= 0 or acc.t3 <= 0)):
            return None
        d = acc.n_features
        m = min(self.basis_dim, d)
        p = min(max(m, 3), d)
        try:
            # The eigen-solve runs in float32 (half the memory traffic; its tolerance is far
            # above float32 rounding); the single-topic corrections use float64 products.
            S = SymmetricMatrix(C, d, buffer=self._scratch(d), dtype=np.float32)
            s_vec, W, T2 = acc.s, acc.weight, acc.t2
            multinomial = self.family == "multinomial"
            c_times = (SymmetricMatrix(C, d).matmul if multinomial
                       else None)

            def m2_times(B: np.ndarray) -> np.ndarray:
                B2 = np.asarray(B, dtype=np.float64).reshape(d, -1)
                out = S.matmul(B2)
                out = (out - s_vec[:, None] * B2) / T2 if multinomial else out / W
                return out.reshape(np.shape(B))

            vals, vecs = self._top_eigenpairs(m2_times, d, p, acc.basis, v.node_id)
            n_res = len(v.reservoir)
            rows = v.reservoir.to_csr() if n_res else None
            row_weight = acc.weight / n_res if n_res else 0.0
            P_new = _complete_basis(vecs[:, :m], m, d, self._eig_seed(v.node_id, 1))
            if acc.basis is None:
                acc.set_basis(P_new, rows=rows, row_weight=row_weight)
            elif vals[1] > 0:
                E = vecs[:, :2].T / np.sqrt(vals[:2])[:, None]
                if acc.basis_residual(E) > self.basis_tol:
                    acc.set_basis(P_new, rows=rows, row_weight=row_weight)
                    self.n_rebases_ += 1
            moments = NodeMoments(
                m2=KnownSpectrumOperator(vals, vecs),
                m1=acc.first_moment(),
                third=lambda E: acc.third_slices(E, c_times=c_times),
            )
            split = compute_split(moments, family=self.family, method=self.method,
                                  reference_discriminators=reference,
                                  random_state=self.random_state)
            quality = dict(split.quality)
            quality["basis_residual"] = acc.basis_residual(split.whitening.pinv)
            return replace(split, quality=quality)
        except (ValueError, spla.ArpackNoConvergence, spla.ArpackError,
                np.linalg.LinAlgError):
            return None

    def _spawn_children(self, v: _Node, split: Split, C_full: np.ndarray) -> list[int] | None:
        """Two new leaves from v's reservoir routed by ``split``, scaled to v's weight."""
        assert self.n_features_ is not None
        X = v.reservoir.to_csr()
        n = X.shape[0]
        if n == 0:
            return None
        side = _router_side(split.router, X)
        scale = v.acc.weight / n
        kids: list[_Node] = []
        for j in (0, 1):
            rows = np.flatnonzero(side == j)
            if rows.size == 0:
                return None
            nid = self._next_id + j
            child = self._new_node(nid, v.node_id, v.depth + 1)
            Xj = X[rows]
            Xj.sort_indices()
            child.acc.update(Xj, np.full(rows.size, scale))
            child.acc.set_basis(self._basis_from_rows(Xj, nid, v.acc.basis), rows=Xj,
                                row_weight=scale)
            child.reservoir = v.reservoir.subset(rows)
            kids.append(child)
        self._next_id += 2
        offset = C_full.copy() if C_full is not v.acc.C else C_full
        for child in kids:
            assert child.acc.C is not None
            offset -= child.acc.C
        v.acc.C = offset
        v.children = [k.node_id for k in kids]
        v.router = split.router
        v.discriminators = split.discriminators
        v.quality = {k: float(x) for k, x in split.quality.items()}
        for k in kids:
            k.born_version = self.model_version_ + 1
            self.nodes_[k.node_id] = k
        return v.children

    def _pool(self) -> PackedBufferPool:
        assert self.n_features_ is not None
        size = self.n_features_ * (self.n_features_ + 1) // 2
        pool = getattr(self, "_buffers", None)
        if pool is None or pool.size != size:
            pool = self._buffers = PackedBufferPool(size)
        return pool

    def _delete_nodes(self, node_ids: list[int]) -> None:
        """Remove nodes; their C buffers go back to the pool."""
        for nid in node_ids:
            self._pool().release(self.nodes_.pop(nid).acc.C)

    def _drop_subtree_below(self, v: _Node) -> list[int]:
        removed = [nid for c in v.children for nid in self._subtree(c)]
        self._delete_nodes(removed)
        v.children = []
        v.router = None
        v.discriminators = None
        return removed

    def _record(self, event: str, v: _Node, **extra: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "event": event,
            "node": v.node_id,
            "children": list(v.children),
            "version": -1,
            "n_events": self.n_events_seen_,
            "weight": float(self._weight_true(v)),
        }
        rec.update(extra)
        return rec

    def _stale(self, v: _Node) -> bool:
        frac = min(self.refit_min_new_fraction * 2.0**v.backoff,
                   max(self.refit_max_new_fraction, self.refit_min_new_fraction))
        return v.fresh > 0 and v.fresh >= frac * v.acc.weight

    def _plan_internal(
        self, nid: int, plans: dict[int, tuple[Any, ...]], into: np.ndarray | None = None
    ) -> None:
        """Post-order pass: assemble full packed C where needed and plan each node's refit.

        An internal node's C is its offset plus its children's full C (design §3). A node that
        needs its own full C (stale or pruned) sums its subtree into a fresh buffer; any other
        node adds its offset and its children straight into the buffer of the nearest
        ancestor that needs one (``into``), so the temporaries are one buffer per stale node on
        the current path and untouched subtrees cost nothing. Decisions are applied top-down
        afterwards by :meth:`_apply_plans` (a parent's re-split or prune overrides its
        descendants' plans).
        """
        v = self.nodes_[nid]
        assert v.acc.C is not None
        if v.is_leaf:
            if into is not None:
                into += v.acc.C
            return
        W = self._weight_true(v)
        kid_w = [self._weight_true(self.nodes_[c]) for c in v.children]
        prune = W <= 0 or min(kid_w) < self.prune_fraction * W
        stale = self._stale(v)
        if not (prune or stale):
            if into is not None:
                into += v.acc.C
            for c in v.children:
                self._plan_internal(c, plans, into)
            return
        full = self._pool().copy_of(v.acc.C)
        for c in v.children:
            self._plan_internal(c, plans, full)
        if into is not None:
            into += full
        if prune:
            plans[nid] = ("prune", full, kid_w)
        elif stale:
            split = self._node_split(v, full, v.discriminators)
            v.fresh = 0.0
            if split is not None and not self._quality_ok(split):
                # The data no longer support a split: keep the router; a child that stops
                # receiving events then decays and is pruned.
                plans[nid] = ("stale",)
            elif split is not None:
                X = v.reservoir.to_csr()
                assert v.router is not None
                share = (
                    float(np.mean(_router_side(v.router, X) != _router_side(split.router, X)))
                    if X.shape[0] else 0.0
                )
                if share > self.resplit_threshold:
                    plans[nid] = ("re-split", split, full, share)
                else:
                    plans[nid] = ("update", split, share)
                # Back off on a node whose split did not move (design §5: skip nodes whose
                # sums barely changed); any real change resets the schedule.
                v.backoff = min(v.backoff + 1, 30) if share <= self.stable_share else 0
        if plans.get(nid, ("",))[0] not in ("prune", "re-split"):
            self._pool().release(full)

    def _apply_plans(
        self, nid: int, plans: dict[int, tuple[Any, ...]], records: list[dict[str, Any]],
        touched: set[int],
    ) -> None:
        v = self.nodes_[nid]
        if v.is_leaf:
            return
        plan = plans.get(nid, ("keep",))
        kind = plan[0]
        if kind == "prune":
            _, full, kid_w = plan
            removed = self._drop_subtree_below(v)
            v.acc.C = full
            v.quality = {}
            touched.add(nid)
            records.append(self._record("prune", v, removed=removed,
                                        child_weights=[float(x) for x in kid_w]))
            return
        if kind == "stale":
            v.quality = {**v.quality, "stale_split": 1.0}
        elif kind == "re-split":
            _, split, full, share = plan
            old_children, old_router, old_D = v.children, v.router, v.discriminators
            old_offset = v.acc.C
            removed = [n for c in old_children for n in self._subtree(c)]
            v.children = []
            v.acc.C = full
            kids = self._spawn_children(v, split, full)
            if kids is None:  # degenerate new split: keep the old subtree
                v.children, v.router, v.discriminators = old_children, old_router, old_D
                v.acc.C = old_offset
            else:
                self._delete_nodes(removed)
                touched.update([nid, *kids])
                records.append(self._record("re-split", v, removed=removed, rerouted=share))
                return
        elif kind == "update":
            _, split, share = plan
            v.router = split.router
            v.discriminators = split.discriminators
            q = {k: float(x) for k, x in split.quality.items()}
            q["rerouted"] = share
            v.quality = q
            records.append(self._record("update", v, rerouted=share))
        for c in list(v.children):
            self._apply_plans(c, plans, records, touched)

    def _quality_ok(self, split: Split) -> bool:
        """Split-quality floors (design §4): G eigen-gap and the λ₂ − λ₃ gap of M2."""
        q = split.quality
        return (q.get("rotation_gap", 0.0) >= self.min_rotation_gap
                and q.get("spectral_gap", 0.0) >= self.min_spectral_gap)

    def _try_split_leaf(self, v: _Node, records: list[dict[str, Any]]) -> bool:
        assert v.acc.C is not None
        v.fresh = 0.0
        split = self._node_split(v, v.acc.C, None)
        if split is None:
            return False
        q = split.quality
        if not self._quality_ok(split):
            v.quality = {k: float(x) for k, x in q.items()}
            return False
        X = v.reservoir.to_csr()
        side = _router_side(split.router, X)
        share = float(side.mean()) if X.shape[0] else 0.0
        if min(share, 1.0 - share) < max(self.min_child_fraction, 1e-12):
            v.quality = {k: float(x) for k, x in q.items()}
            v.quality["child_share"] = min(share, 1.0 - share)
            return False
        kids = self._spawn_children(v, split, v.acc.C)
        if kids is None:
            return False
        records.append(self._record("split", v, child_share=[1.0 - share, share]))
        return True

    def refit(self) -> list[dict[str, Any]]:
        """Recompute splits top-down, re-split / prune / split (design §5); lineage records.

        Callable by hand; the policy calls it every ``refit_every`` events and/or
        ``refit_every_seconds`` of event time. Returns this refit's lineage records (empty when
        nothing changed).
        """
        t0 = time.perf_counter()
        records: list[dict[str, Any]] = []
        if self.n_features_ is not None and self.nodes_:
            touched: set[int] = set()
            plans: dict[int, tuple[Any, ...]] = {}
            self._plan_internal(self.root_id_, plans)
            self._apply_plans(self.root_id_, plans, records, touched)
            del plans
            leaves = [
                v for v in self.nodes_.values()
                if v.is_leaf and v.node_id not in touched and v.depth < self.max_depth
                and self._weight_true(v) >= self.min_split_weight and self._stale(v)
                and len(v.reservoir) >= self.min_reservoir_split
            ]
            leaves.sort(key=lambda v: (-v.acc.weight, v.node_id))
            n_leaves = sum(1 for v in self.nodes_.values() if v.is_leaf)
            for v in leaves:
                if n_leaves >= self.max_leaves:
                    break
                if self._try_split_leaf(v, records):
                    n_leaves += 1
            if records:
                self.model_version_ += 1
                for rec in records:
                    rec["version"] = self.model_version_
                self.lineage_.extend(records)
                if len(self.lineage_) > self.max_lineage:
                    del self.lineage_[: len(self.lineage_) - self.max_lineage]
            self._rebuild_model()
        self.n_refits_ += 1
        self._events_since_refit = 0
        self._refit_clock = self._clock
        self.last_refit_time_ = self._clock
        self.last_refit_duration_ = time.perf_counter() - t0
        return records

    # ------------------------------------------------------------------ merge
    def _structure(self) -> list[tuple[int, int, tuple[int, ...]]]:
        return [(nid, v.parent, tuple(v.children)) for nid, v in sorted(self.nodes_.items())]

    def merge(self, other: StreamingHierarchy) -> StreamingHierarchy:
        """Add the sums of another engine that routed with the same model version and tree.

        Exact for W, s, C, T, T1–T3 (design §3 "merge"); reservoirs are combined by weighted
        sampling. Both engines must share the configuration, the tree, the model version and
        every node's tracked basis. Returns self.
        """
        if not isinstance(other, StreamingHierarchy):
            raise TypeError("can only merge another StreamingHierarchy")
        if other.get_config() != self.get_config() or other.n_features_ != self.n_features_:
            raise ValueError("cannot merge engines with different configurations")
        if other.model_version_ != self.model_version_ or other._structure() != self._structure():
            raise ValueError("cannot merge engines with different model versions or trees")
        factor = 1.0
        if self.half_life is not None and other._time_ref is not None:
            if self._time_ref is None:
                self._time_ref = other._time_ref
            factor = float(np.exp2((other._time_ref - self._time_ref) / self.half_life))
        for nid, v in self.nodes_.items():
            o = other.nodes_[nid]
            oacc = o.acc
            if factor != 1.0:
                oacc = oacc.copy()
                oacc.decay(factor)
            rng = np.random.default_rng([self.random_state, nid, self._batch_counter, 1])
            v.reservoir = Reservoir.combine(
                [(v.reservoir, v.acc.weight), (o.reservoir, oacc.weight)],
                self.reservoir_size, rng,
            )
            v.acc.merge(oacc)
            v.fresh += o.fresh * factor
        self.n_events_seen_ += other.n_events_seen_
        self._events_since_refit += other._events_since_refit
        self._batch_counter = max(self._batch_counter, other._batch_counter) + 1
        for attr in ("_clock",):
            a, b = getattr(self, attr), getattr(other, attr)
            setattr(self, attr, b if a is None else a if b is None else max(a, b))
        self._rebuild_model()
        return self

    def fork(self) -> StreamingHierarchy:
        """A copy with the same config, tree, routers, bases and model version but empty sums.

        For sharded workers: each fork learns its share and :meth:`merge` adds the partials.
        """
        out = StreamingHierarchy.from_archive(*self.to_archive())
        for v in out.nodes_.values():
            acc = v.acc
            acc.weight = acc.t1 = acc.t2 = acc.t3 = 0.0
            acc.s[:] = 0.0
            if acc.C is not None:
                acc.C[:] = 0.0
            if acc.T is not None:
                acc.T[:] = 0.0
            v.fresh = 0.0
            v.reservoir = Reservoir(self.reservoir_size, v.reservoir.n_features)
        out.n_events_seen_ = 0
        out._events_since_refit = 0
        out._rebuild_model()
        return out

    # ------------------------------------------------------------------ snapshots
    def to_archive(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Manifest (schema, config, tree, lineage, counters, vocabulary) + arrays."""
        arrays: dict[str, np.ndarray] = {}
        nodes_meta = []
        for nid in sorted(self.nodes_):
            v = self.nodes_[nid]
            acc_meta, acc_arrays = v.acc.to_archive()
            res_meta, res_arrays = v.reservoir.to_archive()
            for name, arr in {**acc_arrays, **res_arrays}.items():
                arrays[f"n{nid}_{name}"] = arr
            if v.router is not None:
                arrays[f"n{nid}_router_w"] = v.router.weights
                arrays[f"n{nid}_router_b"] = v.router.bias
            if v.discriminators is not None:
                arrays[f"n{nid}_D"] = v.discriminators
            nodes_meta.append({
                "id": nid,
                "parent": v.parent,
                "depth": v.depth,
                "children": list(v.children),
                "absolute": None if v.router is None else bool(v.router.absolute),
                "has_D": v.discriminators is not None,
                "quality": {k: float(x) for k, x in sorted(v.quality.items())},
                "fresh": float(v.fresh),
                "backoff": v.backoff,
                "born_version": v.born_version,
                "acc": acc_meta,
                "reservoir": res_meta,
            })
        manifest: dict[str, Any] = {
            "format": "streammom",
            "kind": "streaming-hierarchy",
            "schema_version": ENGINE_SCHEMA_VERSION,
            "config": self.get_config(),
            "n_features": self.n_features_,
            "state": {
                "root_id": self.root_id_,
                "model_version": self.model_version_,
                "n_events_seen": self.n_events_seen_,
                "n_rebases": self.n_rebases_,
                "n_refits": self.n_refits_,
                "next_id": self._next_id,
                "batch_counter": self._batch_counter,
                "events_since_refit": self._events_since_refit,
                "time_ref": self._time_ref,
                "clock": self._clock,
                "refit_clock": self._refit_clock,
                "last_refit_time": self.last_refit_time_,
            },
            "nodes": nodes_meta,
            "lineage": self.lineage_,
            "vocabulary": None if self.vocabulary is None else self.vocabulary.to_archive()[0],
        }
        return manifest, arrays

    @classmethod
    def from_archive(
        cls, manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
    ) -> StreamingHierarchy:
        """Rebuild an engine from :meth:`to_archive` output (validates the schema).

        The archive is data from outside. Before anything is allocated, what the manifest
        declares is checked against the arrays it comes with (:func:`_check_archive`): the
        dimension, the vocabulary and every node's sums agree, and the reservoir buffers the
        nodes would allocate (not stored in the archive) fit :data:`DEFAULT_MAX_BYTES`. The
        tree is checked before anything walks it (one root — ``state.root_id`` —, links
        consistent both ways, no cycle, every node reachable, true depths). Any violation, or
        a missing or mistyped field, raises :class:`SnapshotFormatError` (one line).
        """
        check_manifest(
            manifest,
            kind="streaming-hierarchy",
            schema_version=ENGINE_SCHEMA_VERSION,
            what="engine snapshot",
        )
        try:
            by_node: dict[str, dict[str, np.ndarray]] = {}
            for key, arr in arrays.items():  # "n12_res_idx" → by_node["n12"]["res_idx"]
                head, sep, tail = key.partition("_")
                if sep:
                    by_node.setdefault(head, {})[tail] = arr
            _check_archive(manifest, by_node)
            vocab = (None if manifest.get("vocabulary") is None
                     else Vocabulary.from_archive(manifest["vocabulary"]))
            if vocab is not None and vocab.n_features != int(manifest["n_features"]):
                raise SnapshotFormatError(
                    f"malformed engine snapshot: the vocabulary has {vocab.n_features} "
                    f"features, the engine {manifest['n_features']}"
                )
            cfg = dict(manifest["config"])
            eng = cls(None, vocab, **cfg) if vocab is not None else cls(None, **cfg)
            d = manifest["n_features"]
            st = manifest["state"]
            eng.model_version_ = int(st["model_version"])
            eng.n_events_seen_ = int(st["n_events_seen"])
            eng.n_rebases_ = int(st["n_rebases"])
            eng.n_refits_ = int(st["n_refits"])
            eng._next_id = int(st["next_id"])
            eng._batch_counter = int(st["batch_counter"])
            eng._events_since_refit = int(st["events_since_refit"])
            eng._time_ref = None if st["time_ref"] is None else float(st["time_ref"])
            eng._clock = None if st["clock"] is None else float(st["clock"])
            eng._refit_clock = None if st["refit_clock"] is None else float(st["refit_clock"])
            eng.last_refit_time_ = (None if st["last_refit_time"] is None
                                    else float(st["last_refit_time"]))
            eng.lineage_ = [dict(r) for r in manifest["lineage"]]
            if d is None:
                return eng
            eng.n_features_ = int(d)
            eng.root_id_ = int(st["root_id"])
            nodes: dict[int, _Node] = {}
            for meta in manifest["nodes"]:
                nid = int(meta["id"])
                sub = by_node.get(f"n{nid}", {})
                acc = MomentAccumulator.from_archive(meta["acc"], sub)
                res = Reservoir.from_archive(meta["reservoir"], sub)
                router = None
                if meta["absolute"] is not None:
                    router = Router(np.array(sub["router_w"], dtype=np.float64),
                                    np.array(sub["router_b"], dtype=np.float64),
                                    bool(meta["absolute"]))
                nodes[nid] = _Node(
                    node_id=nid,
                    parent=int(meta["parent"]),
                    depth=int(meta["depth"]),
                    acc=acc,
                    reservoir=res,
                    children=[int(c) for c in meta["children"]],
                    router=router,
                    discriminators=(np.array(sub["D"], dtype=np.float64)
                                    if meta["has_D"] else None),
                    quality={str(k): float(x) for k, x in meta["quality"].items()},
                    fresh=float(meta["fresh"]),
                    backoff=int(meta["backoff"]),
                    born_version=int(meta["born_version"]),
                )
            links = {nid: (n.parent, n.children) for nid, n in nodes.items()}
            if check_tree(links) != eng.root_id_:
                raise ValueError(f"root_id {eng.root_id_} is not the tree's root")
            eng.nodes_ = nodes
            eng._rebuild_model()
            return eng
        except SnapshotFormatError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError,
                RecursionError) as exc:
            raise SnapshotFormatError(f"malformed engine snapshot: {exc!r}") from exc

    def snapshot(self) -> bytes:
        """Deterministic archive bytes of the whole engine state (never pickle)."""
        return archive_bytes(*self.to_archive(), compresslevel=1)

    @classmethod
    def restore(cls, data: bytes) -> StreamingHierarchy:
        """Inverse of :meth:`snapshot`; continuing the restored engine replays byte for byte."""
        return cls.from_archive(*read_archive(data))

    def __repr__(self) -> str:
        n_leaves = sum(1 for v in self.nodes_.values() if v.is_leaf)
        return (
            f"StreamingHierarchy(d={self.n_features_}, nodes={len(self.nodes_)}, "
            f"leaves={n_leaves}, version={self.model_version_}, events={self.n_events_seen_})"
        )


def _check_archive(manifest: Mapping[str, Any],
                   by_node: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    """Refuse an engine archive whose manifest would make ``from_archive`` allocate beyond
    what the archive holds, before anything is allocated.

    Checked: ``n_features`` d with d(d+1)/2 float64 sums per node within
    :data:`DEFAULT_MAX_BYTES`; node ids distinct, in [0, :data:`MAX_NODE_ID`] and below
    ``state.next_id``; each node's ``s`` (and ``C`` when it has one) present with the shapes
    d implies; each reservoir of width ≤ 2d + 8, and all of them together (``capacity ×
    width`` index/value buffers, allocated on restore but not stored) within
    :data:`DEFAULT_MAX_BYTES`.
    """
    bad = "malformed engine snapshot: "
    nodes = manifest["nodes"]
    if not isinstance(nodes, list) or not all(isinstance(m, dict) for m in nodes):
        raise SnapshotFormatError(bad + "nodes must be a list of objects")
    if manifest["n_features"] is None:
        if nodes or manifest.get("vocabulary") is not None:
            raise SnapshotFormatError(bad + "nodes or a vocabulary without n_features")
        return
    d = int(manifest["n_features"])
    if d < 2 or packed_size(d) * 8 > DEFAULT_MAX_BYTES:
        raise SnapshotFormatError(bad + f"n_features {d} is out of range")
    capacity = int(manifest["config"]["reservoir_size"])
    ids = [int(meta["id"]) for meta in nodes]
    if len(set(ids)) != len(ids) or not all(0 <= i <= MAX_NODE_ID for i in ids):
        raise SnapshotFormatError(bad + f"node ids must be distinct, in [0, {MAX_NODE_ID}]")
    if ids and int(manifest["state"]["next_id"]) <= max(ids):
        raise SnapshotFormatError(bad + "state.next_id is not above every node id")
    reservoir_bytes = capacity * (8 * 12 + 4)  # the root a vocabulary's constructor makes
    for nid, meta in zip(ids, nodes, strict=True):
        sub = by_node.get(f"n{nid}", {})
        acc, res = meta["acc"], meta["reservoir"]
        s, C = sub.get("s"), sub.get("C")
        if (int(acc["n_features"]) != d or s is None or s.shape != (d,)
                or (acc["has_C"] and (C is None or C.shape != (packed_size(d),)))):
            raise SnapshotFormatError(bad + f"node {nid}: sums do not match n_features {d}")
        width, rows = int(res["width"]), int(res["capacity"])
        if int(res["n_features"]) != d or rows < 1 or not 0 <= width <= 2 * d + 8:
            raise SnapshotFormatError(bad + f"node {nid}: reservoir does not match n_features")
        reservoir_bytes += rows * (max(width, 8) * 12 + 4)
    if reservoir_bytes > DEFAULT_MAX_BYTES:
        raise SnapshotFormatError(
            bad + f"the reservoirs would take {reservoir_bytes} bytes > {DEFAULT_MAX_BYTES}"
        )


def warm_up() -> float:
    """Load the compiled hot-path kernels now instead of on the first batch; returns seconds.

    The kernels (:mod:`streammom._kernels`) are compiled by numba on their first use on a
    machine (a few seconds) and loaded from its on-disk cache afterwards (a fraction of a
    second). A long-running worker calls this at start-up so the first batch's latency is not
    the compiler's. With each family it learns a tiny synthetic batch, refits and learns it again
    (routed through the new split), which exercises every kernel with the argument types the
    engine uses.

    >>> warm_up() >= 0.0
    True
    """
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    X = sp.csr_array((rng.random((256, 16)) < 0.3) * rng.integers(1, 3, size=(256, 16)),
                     dtype=np.float64)
    for family in ("bernoulli", "multinomial"):
        eng = StreamingHierarchy(16, family=family, min_split_weight=1.0,  # type: ignore[arg-type]
                                 min_reservoir_split=8, reservoir_size=64)
        Xf = X if family == "multinomial" else (X > 0).astype(np.float64)
        eng.learn(Xf)
        eng.refit()
        eng.learn(Xf)
    return time.perf_counter() - t0

