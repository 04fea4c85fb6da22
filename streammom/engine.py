"""The streaming hierarchy engine: learn / assign / refit / snapshot (design §3, §5).

:class:`StreamingHierarchy` keeps one :class:`~streammom.moments.MomentAccumulator` and one
:class:`~streammom.reservoir.Reservoir` per node of a binary tree and publishes the current
routing model as an immutable :class:`~streammom.model.HierarchyModel` (``model_``).

Hot path (``learn``), per batch, with no per-event Python loop:

1. route the batch root → leaf with ``model_`` (one compiled walk, only the routers on each
   row's path are scored) — the sums follow this walk; once the refinement has scored the
   leaves, the labels returned are the MAP leaf of its mixture (one (n, d) × (d, k) product,
   :meth:`~streammom.model.HierarchyModel.route`);
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

``refit()`` runs one :class:`~streammom.refit.RefitPass` (update / re-split / prune / split,
top-down; module :mod:`streammom.refit`); its eigen-solves are warm-started block Krylov steps
(:mod:`streammom.eigen`), so its cost is bounded and does not grow with the stream. The node
tree and the refit plan kinds are in :mod:`streammom.tree`, snapshots in
:mod:`streammom.engine_archive`, the parameter table in :mod:`streammom.engine_params`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from html import escape
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from streammom._buffers import PackedBufferPool
from streammom._validation import as_csr, as_weights
from streammom.base import Estimator
from streammom.decay import DecayClock
from streammom.eigen import NodeEigensolver, ScratchBuffer
from streammom.engine_archive import ENGINE_SCHEMA_VERSION, engine_from_archive, engine_to_archive
from streammom.engine_input import (
    check_timestamps,
    columns_in_use,
    looks_like_events,
    narrow_columns,
    one_event,
    state_width,
)
from streammom.engine_merge import fork_of, merge_into
from streammom.engine_params import ENGINE_PARAMETERS
from streammom.estimators import Family, FamilyOption, check_family_data, resolve_family
from streammom.model import (
    FLOOR_MARK,
    HierarchyModel,
    Routing,
)
from streammom.moments import (
    MomentAccumulator,
    row_sums,
)
from streammom.packed import Packed, add_into, dense
from streammom.refine import sample_search_work_of
from streammom.refit import RefitPass
from streammom.refit_budget import (
    light_refit_burst,
    light_refit_cost_events,
    moved_credit,
    refit_affordable_at,
    refit_cost_events,
    sample_search_cost_events,
    spent_past_youth,
    youth_events,
)
from streammom.reservoir import Reservoir
from streammom.rowgram import RowGram, rows_limit
from streammom.serialization import (
    archive_bytes,
    read_archive,
)
from streammom.stream_shift import MOVED_SHIFT, SETTLED_SHIFT, moved_shift
from streammom.tree import (
    LeafLayout,
    Node,
    leaf_layout,
    remove_tree_columns,
    subtree,
    tree_nodes,
    widen_tree,
)
from streammom.vocab import Vocabulary

__all__ = ["ENGINE_SCHEMA_VERSION", "StreamingHierarchy"]

#: BLAS threads a refit runs on, whatever the caller's pools: one, so its reductions (the
#: eigen-solves, the EM passes' products) sum in one order on every machine, and the same
#: events and configuration give byte-identical snapshots whatever the cores — with the pools
#: at their default (one thread a core), a 1-core and a 2-core machine diverged from the first
#: refit on (BENCHMARKS.md "A refit's BLAS threads"). The hot path is left alone: its products
#: are the same on any number of threads. The daemon's refit helper runs the same refit.
REFIT_BLAS_THREADS = 1


class StreamingHierarchy(Estimator):
    """Streaming hierarchical clustering with the spectral method of moments (design §5).

    Parameters
    ----------
    n_features : int or None, default None
        Dimension d (inferred from the first batch, or from ``vocabulary``, when None).
    vocabulary : Vocabulary or None, default None
        Optional :class:`~streammom.vocab.Vocabulary`; ``learn``/``assign`` then also accept
        raw events (token lists or count dicts), and snapshots include it.
    max_depth : int in [0, 32], default 8
    max_leaves : int >= 1, default 16
        The clusters to find. The tree fills this budget wherever a leaf's moments give a
        split: a split is not tested against one component (a test by the partition's
        evidence or by held-out likelihood refused the root split of streams that the full
        tree labels well: BENCHMARKS.md "A leaf's split gated by its evidence"), so a value
        above the clusters in the data splits some of them.
    min_split_weight : float >= 0, default 50.0
        A leaf splits only when its depth < ``max_depth``, the tree has < ``max_leaves`` leaves
        and its decayed weight ≥ ``min_split_weight`` (and the split quality allows, below).
        On a stream too short for ``max_leaves`` leaves of that weight the threshold is the
        average leaf's share, W / ``max_leaves``, at least ``min_reservoir_split``
        (:func:`streammom.refit.split_weight_threshold`).
    half_life : float > 0 or None, default None
    half_life_unit : {"events", "seconds"}, default "events"
        Exponential forgetting: an event's weight halves every ``half_life`` events or seconds
        of event time (``timestamps`` required for seconds). None: no forgetting.
    refit_every : "auto", int >= 1 or None, default "auto"
    refit_every_seconds : float > 0 or None, default None
        Refit policy: after the batch in which this many events (or event-time seconds) passed
        since the last refit (an int caps the growth schedule below). ``"auto"``: the growth
        schedule paced by the cost budget (``refit_budget``), and at most ``half_life``/4
        apart under forgetting counted in events. None disables a trigger; ``refit()`` can
        always be called.
    refit_budget : float in (0, 1), default 0.2
        With ``refit_every="auto"``: refits take at most this share of the engine's work,
        amortised — a proposed refit runs only if the estimated refit spend so far plus its
        own cost (:mod:`streammom.refit_budget`: per node, a constant plus d²) fits b/(1 − b)
        × events seen plus a burst that pays for growing the tree on a young stream (its
        first 16 · ``max_leaves`` · ``reservoir_size`` events; what it leaves unspent is
        forfeited after them) and a small one of its own for the light refits that follow
        it. Deterministic (no clock).
    first_refit : int >= 1 or None, default 50
        Growth schedule: the first refit after ``first_refit`` events, then one each time the
        stream has grown by half since the last refit (as many refits as factors of 1.5,
        whatever the batch size); one refit grows as many levels as the reservoirs support, so
        a tree grows on a stream of a few hundred events too. None: no growth schedule.
        Until the first refit the root is the one leaf, with the stop reason
        ``"first_refit"`` (:data:`streammom.model.STOP_REASONS`).
    reservoir_size : int >= 2, default 1024
        Events kept per node (the bounded sample children and repairs start from; the
        leaves' reservoirs are the rows of the refinement's EM). On wide, weakly separated
        code streams 2048 labels better (30,000 events at d = 3,000: 0.88–0.94 × the oracle's
        ARI against 0.78–0.90) at twice the reservoirs' memory and a youth twice as long
        (BENCHMARKS.md "Removal moves, and EM in the light refits").
    basis_dim : int in [2, 512], default 8
        m, the dimension of the tracked third-order basis (oversampling the top-2 eigenspace).
    method : {"sidiwo", "dsidiwo"}, default "sidiwo"
    family : {"auto", "bernoulli", "multinomial"}, default "auto"
        The model of an event: ``"bernoulli"`` (code sets, raw moments) or ``"multinomial"``
        (token counts, single-topic estimators). ``"auto"`` takes it from the first batch
        learned with an entry (:func:`streammom.estimators.resolve_family`: binary →
        Bernoulli, counts → multinomial; empty events before it are kept) and keeps it: it
        is ``family_``, stored in snapshots; a later batch with counts under a Bernoulli
        ``family_`` is refused with a clear error.
    em : bool, default True
    em_max_iter : int >= 1, default 100
        Likelihood refinement (:mod:`streammom.refine`): every refit ends with at most
        ``em_max_iter`` EM passes of the leaves' mixture over their reservoirs, started from
        the current routers' partition of those rows; every internal node then routes by MAP
        between its two subtrees, and every leaf keeps its component, by which the model
        labels events (MAP leaf). The per-split EM of the growth phase has the same cap. 100
        passes, not 20 or 50: on the bench sets the stream's ARI over five arrival orders
        rises with them (DNA 0.644 → 0.717 → 0.742, its worst order 0.603 → 0.734 from 50 to
        100; R8 0.516 → 0.552, BENCHMARKS.md "over several arrival orders"); EM stops earlier
        once converged. The refinement's passes are also bounded in work, passes × rows ≤
        ``refine.EM_WORK`` (100 passes up to 8,192 rows; design §5), scaled by the rows'
        share of the events learned.
        The moment splits stay the start of every new split. False: moment routers only.
    random_state : int >= 0, default 0
        Seed of every random choice (reservoirs, eigensolver starts).
    refit_min_new_fraction : float >= 0, default 0.1
    refit_max_new_fraction : float >= 0, default 0.25
    stable_share : float in [0, 1], default 0.02
        A node is refit only after receiving new weight ≥ f × its weight, where f starts at
        ``refit_min_new_fraction`` and doubles after every refit that re-routed at most
        ``stable_share`` of the node's reservoir (capped at ``refit_max_new_fraction``; reset by
        any larger change). Under decay the cap bounds the reaction time to about
        log2(1/(1 − cap)) half-lives of the node's own events.
    resplit_threshold : float in [0, 1], default 0.25
        Share of a node's reservoir that must change child under the recomputed router for
        the subtree to be rebuilt (below it the router is updated in place); the recomputed
        split must also explain the reservoir significantly better than the current routing
        (a paired z-test, ``refit.RESPLIT_Z``; design §5).
    prune_fraction : float in [0, 0.5), default 0.02
        A node's children are merged back when one has < this fraction of the node's weight.
    min_child_fraction : float in [0, 0.5), default 0.05
    min_rotation_gap : float in [0, 1], default 0.0
    min_spectral_gap : float in [0, 1], default 0.0
        Split quality floors: each child's share of the reservoir, the relative eigen-gap of G
        (``rotation_gap``) and (λ₂ − λ₃)/λ₁ of M2 (design §4 "split quality").
    basis_tol : float >= 0, default 0.05
        Rebase when ‖E† − E†PPᵀ‖/‖E†‖ exceeds this (design §3 "basis drift").
    min_reservoir_split : int >= 1, default 32
        Reservoir rows a node needs before it may split.
    max_lineage : int >= 0, default 10_000
        Lineage records kept in ``lineage_`` (oldest dropped).
    chunk_size : int >= 1, default 32_768
        Rows per hot-path chunk (bounds temporary memory).

    The bounds are those of :data:`streammom.engine_params.ENGINE_PARAMETERS`, checked at
    construction (:class:`~streammom.params.InvalidParameterError`).

    Attributes
    ----------
    model_ : HierarchyModel
        The published routing model (tree, routers, node means); replaced at every refit.
    model_version_ : int
        Bumped by every refit that changed the tree or a router.
    nodes_ : dict[int, Node]
        Per-node state: moment sums, reservoir, router (:class:`~streammom.tree.Node`).
    lineage_ : list[dict]
        Split / update / re-split / prune records with the version that made them.
    n_features_, n_events_seen_, n_events_since_refit_, n_refits_, n_rebases_,
    last_refit_time_, last_refit_duration_ :
        Dimension and counters (:meth:`refit_due_events`: when the next refit falls due).
    n_light_refits_ : int
        How many of ``n_refits_`` were light (the refinement alone: :meth:`refit`).
    last_refit_light_ : bool
        Whether the last refit this object ran was light (not kept in snapshots: an engine
        restored from one says False).

    Examples
    --------
    >>> from streammom.datasets import make_hierarchical_bernoulli
    >>> X, y, _ = make_hierarchical_bernoulli(6_000, 60, 4, codes_per_event=8.0,
    ...                                       random_state=1)
    >>> eng = StreamingHierarchy(max_depth=2, refit_every=2_000)
    >>> for start in range(0, 6_000, 1_000):
    ...     routing = eng.learn(X[start:start + 1_000])
    >>> eng.model_.n_leaves, eng.model_version_ > 0
    (4, True)
    >>> eng.predict(X[:3]).tolist() == eng.assign(X[:3]).leaf_ids.tolist()
    True
    """

    _parameters = ENGINE_PARAMETERS

    def __init__(
        self,
        n_features: int | None = None,
        vocabulary: Vocabulary | None = None,
        *,
        max_depth: int = 8,
        max_leaves: int = 16,
        min_split_weight: float = 50.0,
        half_life: float | None = None,
        half_life_unit: Literal["events", "seconds"] = "events",
        refit_every: int | Literal["auto"] | None = "auto",
        first_refit: int | None = 50,
        refit_budget: float = 0.2,
        refit_every_seconds: float | None = None,
        reservoir_size: int = 1024,
        basis_dim: int = 8,
        method: Literal["dsidiwo", "sidiwo"] = "sidiwo",
        family: FamilyOption = "auto",
        em: bool = True,
        em_max_iter: int = 100,
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
        # Arguments are stored unchanged (scikit-learn's rule, so ``clone`` works) and checked
        # against the parameter table at once: a stream has no single ``fit`` to wait for.
        self.n_features = n_features
        self.vocabulary = vocabulary
        self.max_depth = max_depth
        self.max_leaves = max_leaves
        self.min_split_weight = min_split_weight
        self.half_life = half_life
        self.half_life_unit = half_life_unit
        self.refit_every = refit_every
        self.first_refit = first_refit
        self.refit_budget = refit_budget
        self.refit_every_seconds = refit_every_seconds
        self.reservoir_size = reservoir_size
        self.basis_dim = basis_dim
        self.method = method
        self.family = family
        self.em = em
        self.em_max_iter = em_max_iter
        self.random_state = random_state
        self.refit_min_new_fraction = refit_min_new_fraction
        self.refit_max_new_fraction = refit_max_new_fraction
        self.stable_share = stable_share
        self.resplit_threshold = resplit_threshold
        self.prune_fraction = prune_fraction
        self.min_child_fraction = min_child_fraction
        self.min_rotation_gap = min_rotation_gap
        self.min_spectral_gap = min_spectral_gap
        self.basis_tol = basis_tol
        self.min_reservoir_split = min_reservoir_split
        self.max_lineage = max_lineage
        self.chunk_size = chunk_size
        self._validate_params()
        if vocabulary is not None:
            if n_features is not None and int(n_features) != vocabulary.n_features:
                raise ValueError("n_features does not match the vocabulary's n_features")
            n_features = vocabulary.n_features
        if n_features is not None and (isinstance(n_features, bool)
                                       or not isinstance(n_features, int | np.integer)):
            raise ValueError(f"StreamingHierarchy: n_features must be an int or None, "
                             f"got {n_features!r}")

        # the family of the sums; with "auto" provisional until the first batch with an entry
        self.family_: Family = "bernoulli" if family == "auto" else family
        self._family_pending = family == "auto"
        self.n_features_: int | None = None
        self.nodes_: dict[int, Node] = {}
        self.root_id_ = 0
        self.model_: HierarchyModel | None = None
        self.model_version_ = 0
        self.lineage_: list[dict[str, Any]] = []
        self.n_events_seen_ = 0
        self.last_refit_duration_ = 0.0
        self.last_refit_time_: float | None = None
        self.n_rebases_ = 0
        self.n_refits_ = 0
        self.n_light_refits_ = 0
        self.last_refit_light_ = False  # this process's last refit (not kept in snapshots)
        self._next_id = 1
        self._batch_counter = 0
        self._events_since_refit = 0
        self._refit_spent = 0.0  # estimated refit work so far, in events (refit_budget)
        self._moved_at_last_refit = False  # the shift test's floor (stream_shift)
        self._light_burst_spent = 0.0  # light refits charged to their own burst (refit_budget)
        self._decay = DecayClock()  # event time, τ_ref of the stored sums, last refit time
        self._buffers: PackedBufferPool | None = None  # reused d(d+1)/2 refit temporaries
        self._scratch = ScratchBuffer()  # reused d x d float32 eigen-solve buffer
        self._layout = LeafLayout(np.zeros(1, dtype=np.int64), 1, [])
        if vocabulary is not None:
            self._init_tree(state_width(vocabulary, 0, len(vocabulary)))
        elif n_features is not None:
            self._init_tree(int(n_features))

    # ------------------------------------------------------------------ config
    def get_config(self) -> dict[str, Any]:
        """The hyper-parameters as plain JSON values (from the table), as stored in snapshots."""
        return self._plain_params()

    # ------------------------------------------------------------------ tree helpers
    def _new_node(self, node_id: int, parent: int, depth: int) -> Node:
        """A node with empty sums; its C starts as rows (:mod:`streammom.rowgram`), packed
        once they outgrow it."""
        assert self.n_features_ is not None
        acc = MomentAccumulator(self.n_features_, family=self.family_, second_order=False)
        acc.C = RowGram(self.n_features_)
        return Node(
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
        self.nodes_[0].stop_reason = "first_refit"  # until the first refit: never silent
        self.root_id_ = 0
        self._rebuild_model()

    def _scale(self) -> float:
        """Factor turning stored sums into true (decayed) sums now."""
        return self._decay.scale(self.half_life)

    def _current_model(self) -> HierarchyModel:
        """The tree as it stands now, as an immutable HierarchyModel (true, decayed weights)."""
        assert self.n_features_ is not None
        nodes = tree_nodes(self.nodes_, self.root_id_, self._scale())
        names = (self.vocabulary.feature_names[: self.n_features_]
                 if self.vocabulary is not None else None)
        return HierarchyModel(
            nodes,
            n_features=self.n_features_,
            family=self.family_,
            method=self.method,
            version=self.model_version_,
            feature_names=names,
            metadata={"engine": "StreamingHierarchy", "n_events_seen": self.n_events_seen_},
        )

    def _rebuild_model(self) -> None:
        """Publish the current tree as ``model_``; refresh the hot path's leaf layout."""
        self.model_ = self._current_model()
        # DFS leaf ranks: every node's rows are one contiguous slice after sorting by rank.
        self._layout = leaf_layout(self.nodes_, self.root_id_)

    def raise_version(self, at_least: int) -> None:
        """Renumber the current model to version ``at_least`` if it is below it.

        A learner that takes over from another (design §6, scale-out) restores the last
        checkpoint, whose version may be below the versions its predecessor published since;
        it continues above them so published versions never go back. The tree and the sums
        are untouched; later refits count on from the new number.
        """
        if at_least > self.model_version_:
            self.model_version_ = int(at_least)
            if self.model_ is not None:
                self.model_ = self._current_model()

    # ------------------------------------------------------------------ input
    def _as_matrix(self, X: Any, *, learning: bool = False) -> sp.csr_array:
        vocab = self.vocabulary
        if vocab is not None:
            if looks_like_events(X):
                binary = self.family_ == "bernoulli" and not self._family_pending
                X = vocab.transform(X, binary=binary)
            X = self._columns_in_use(as_csr(X), vocab)
        else:
            X = as_csr(X, self.n_features_)
        X.eliminate_zeros()
        if self._family_pending and learning and X.nnz:  # empty rows say nothing of it
            self._resolve_family(X)
        if not self._family_pending:
            self._check_family(X)
        if self.n_features_ is None:
            self._init_tree(X.shape[1])
        return X

    def _resolve_family(self, X: sp.csr_array) -> None:
        """``family="auto"``: fix ``family_`` from the first batch learned that holds an entry
        (a batch of empty rows says nothing of the family). When nothing has been learned the
        (empty) tree is rebuilt with accumulators of that family. Events learned before were
        all empty: the provisional sums hold their weights and nothing else (s, C and T zero,
        and T₁ = T₂ = T₃ = 0 for token counts: ``estimators.single_topic_normalisers``),
        which are the same sums in either family, so they are relabelled, not lost."""
        self.family_ = resolve_family("auto", X)
        self._family_pending = False
        if self.n_features_ is None:
            return
        if not self.n_events_seen_:
            self._init_tree(self.n_features_)
            return
        for v in self.nodes_.values():
            v.acc.family = self.family_
            v.score = None
        self._rebuild_model()

    def _check_family(self, X: sp.csr_array) -> None:
        try:
            check_family_data(X, self.family_)
        except ValueError as exc:
            if self.family != "auto":
                raise
            raise ValueError(f"family='auto' took 'bernoulli' from the first batch with an entry "
                             f"(binary); this batch has counts: {exc}") from None

    def _columns_in_use(self, X: sp.csr_array, vocab: Vocabulary) -> sp.csr_array:
        """``X`` cut to the state's width, widening the state first when the vocabulary has
        grown past it (:func:`streammom.engine_input.columns_in_use`)."""
        assert self.n_features_ is not None
        width = columns_in_use(X, vocab, self.n_features_)
        if width > self.n_features_:
            self._widen(width)
        return narrow_columns(X, self.n_features_)

    def _widen(self, d_new: int) -> None:
        """Grow the state to ``d_new`` columns (zero sums); routing is unchanged."""
        widen_tree(self.nodes_, d_new)
        self.n_features_ = d_new
        self._buffers = None
        self._rebuild_model()

    def _stored_weights(self, w: np.ndarray, ts: np.ndarray | None) -> np.ndarray:
        """Event weights in the lazily scaled units of the sums (:mod:`streammom.decay`);
        advances the event clock and renormalises every stored sum when it asks to."""
        if self.half_life is None or self.half_life_unit == "seconds":
            tau = ts
        else:
            tau = self.n_events_seen_ + np.arange(w.size, dtype=np.float64)
        stored, rescale = self._decay.stored_weights(w, tau, self.half_life)
        if rescale is not None:
            for v in self.nodes_.values():
                v.acc.decay(rescale)
                v.fresh *= rescale
                v.arrived *= rescale
        return stored

    # ------------------------------------------------------------------ public API
    def learn(self, X: Any, weights: Any = None, timestamps: Any = None, *,
              refit: bool = True) -> Routing:
        """Route with the current model, add the batch to the sums on its paths, run the policy.

        Returns the routing of the batch (leaf, path, margins, model version used): the label
        :meth:`assign` gives, the MAP leaf of the refined mixture once the leaves are scored
        (:mod:`streammom.model`). The sums follow the routers' walk
        (:meth:`~streammom.model.HierarchyModel.route_tree`), the next refit's start.

        ``refit=False`` leaves a refit that falls due to the caller (:meth:`refit_due`, then
        :meth:`refit` here or in a helper process: :mod:`streammom.background_refits`).
        """
        routing = self._learn(X, weights, timestamps, refit=refit, label=True)
        assert routing is not None
        return routing

    def _learn(self, X: Any, weights: Any, timestamps: Any, *, refit: bool, label: bool
               ) -> Routing | None:
        """:meth:`learn`; ``label=False`` skips the labels (the scored leaves' MAP, O(nnz · k)
        a batch: a tenth of :meth:`partial_fit`'s time at d = 2,000, 16 leaves) and returns
        None. The sums and the policy are the same either way."""
        X = self._as_matrix(X, learning=True)
        n = X.shape[0]
        w = as_weights(weights, n)
        ts = check_timestamps(timestamps, n, required=self.half_life is not None
                              and self.half_life_unit == "seconds")
        assert self.model_ is not None
        walk = self.model_.route_tree(X, check_input=False)  # the sums follow the routers
        routing = (None if not label else
                   self.model_.route(X, check_input=False) if self.model_.scored else walk)
        if n:
            stored = self._stored_weights(w, ts)
            for start in range(0, n, self.chunk_size):
                stop = min(start + self.chunk_size, n)
                self._accumulate(X[start:stop] if (start or stop < n) else X,
                                 stored[start:stop], walk.leaf_ids[start:stop])
            self.n_events_seen_ += n
            self._events_since_refit += n
        if refit and self.refit_due():
            self.refit(light=None)
        return routing

    def partial_fit(self, X: Any, weights: Any = None, timestamps: Any = None
                    ) -> StreamingHierarchy:
        """:meth:`learn` without the routing (scikit-learn style): the labels are not computed;
        returns self."""
        self._learn(X, weights, timestamps, refit=True, label=False)
        return self

    def assign(self, X: Any) -> Routing:
        """Route without learning: leaf, path, margins and model version per row."""
        X = self._as_matrix(X)
        assert self.model_ is not None
        return self.model_.route(X, check_input=False)

    def predict(self, X: Any) -> np.ndarray:
        """Leaf id of every row under the current model."""
        return self.assign(X).leaf_ids

    def learn_one(self, event: Any, *, weight: float = 1.0, timestamp: float | None = None
                  ) -> int:
        """Learn one event (River style): a token list or count mapping (with a vocabulary)
        or a vector of length d. Returns the leaf it was routed to. A batch of one costs a
        little more per event than :meth:`learn` on a batch; use that on streams.

        >>> from streammom import Vocabulary
        >>> eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=16))
        >>> eng.learn_one(["E11.9", "I10"]), eng.predict_one(["I10"]), eng.n_events_seen_
        (0, 0, 1)
        """
        X = one_event(event, has_vocabulary=self.vocabulary is not None)
        ts = None if timestamp is None else [timestamp]
        return int(self.learn(X, weights=[weight], timestamps=ts).leaf_ids[0])

    def predict_one(self, event: Any) -> int:
        """The leaf of one event under the current model (no learning)."""
        X = one_event(event, has_vocabulary=self.vocabulary is not None)
        return int(self.assign(X).leaf_ids[0])

    def describe(self, n_top: int = 5) -> str:
        """The tree as indented text with the sums as they are now (``model_`` keeps the
        weights of the last refit); see :meth:`HierarchyModel.describe`."""
        return self._current_model().describe(n_top) if self.n_features_ else repr(self)

    def _repr_html_(self) -> str:
        """Notebook display: the parameters, then the tree as it is now."""
        tree = self._current_model()._repr_html_() if self.n_features_ else ""
        return f"<p><code>{escape(repr(self))}</code></p>{tree}"

    def refit_due(self) -> bool:
        """Whether the refit policy asks for a refit now (after the batches learned so far)."""
        if self._events_since_refit >= self.refit_due_events():
            return True
        elapsed = self._decay.since_refit()
        return bool(self.refit_every_seconds is not None and elapsed is not None
                    and elapsed >= self.refit_every_seconds)

    @property
    def n_events_since_refit_(self) -> int:
        """Events learned since the last refit."""
        return self._events_since_refit

    def refit_due_events(self) -> float:
        """Events since the last refit at which the event trigger falls due, at the current tree
        and d: the interval of :meth:`_refit_interval`, and with ``refit_every="auto"`` no
        sooner than the cost budget affords the refit
        (:func:`streammom.refit_budget.refit_affordable_at`); ``inf`` without an event trigger.

        The refit policy compares :attr:`n_events_since_refit_` with it; so does an operator
        (the daemon exports both): a count past it that does not fall back means refits are
        due and not completing. Counts and the tree only, never a clock.
        """
        if self.refit_every is None:
            return float("inf")
        due = self._refit_interval()
        if self.refit_every == "auto" and self.n_features_ is not None:
            seen_at_last_refit = self.n_events_seen_ - self._events_since_refit
            affordable = self._affordable_at(light=False)
            if self.em:  # a light refit when a full one is not affordable yet
                affordable = min(affordable, self._affordable_at(light=True))
            due = max(due, affordable - seen_at_last_refit)
        return float(due)

    def _affordable_at(self, *, light: bool) -> int:
        """Events seen at which the budget affords a full (or a light) refit of the tree: a
        light refit while the light refits' own burst has room for it, at once (0); past the
        stream's youth (:func:`~streammom.refit_budget.youth_events`) with what the young
        stream left of its allowance forfeited."""
        assert self.n_features_ is not None
        if light and self._in_light_burst():
            return 0
        credit = (moved_credit(self.max_leaves, self.n_features_,
                               sample_search_work_of(self.family_))
                  if not light and self.stream_moved() else 0.0)
        return refit_affordable_at(self.refit_budget, self._refit_spent,
                                   self._refit_cost(light=light), self.max_leaves,
                                   self.n_features_, youth=self._youth(),
                                   n_events=self.n_events_seen_, credit=credit)

    def share_shift(self) -> tuple[float, float]:
        """How far the leaves' shares of the events learned since the last refit are from
        their shares of the stream sampled at it, and the shift at which the stream counts as
        moved: ``(shift, threshold)`` (:func:`streammom.stream_shift.moved_shift`; ``(0.0,
        inf)`` on a tree of one leaf or with no events since; the floor is lower after a
        refit that found the stream settled). A moved stream's next refit
        is full while the spend stays within the budget's credit for it
        (:func:`streammom.refit_budget.moved_credit`)."""
        leaves = [v for v in self.nodes_.values() if v.is_leaf]
        if len(leaves) < 2:
            return 0.0, float("inf")
        return moved_shift(np.array([v.refit_rows for v in leaves]),
                           np.array([v.arrived for v in leaves]), self._events_since_refit,
                           floor=MOVED_SHIFT if self._moved_at_last_refit else SETTLED_SHIFT)

    def stream_moved(self) -> bool:
        """Whether the stream moved since the last refit (:meth:`share_shift`)."""
        shift, threshold = self.share_shift()
        return shift >= threshold

    def _sample_shares(self) -> None:
        """After a refit: route the root's reservoir (the stream's sample) by the routers the
        refit left, each leaf keeping the rows it receives, and start every leaf's count of
        the weight it receives anew (:mod:`streammom.stream_shift`)."""
        assert self.model_ is not None
        sample = self.nodes_[self.root_id_].reservoir
        counts: dict[int, int] = {}
        if len(sample) and len(self.nodes_) > 1:
            ids, n = np.unique(self.model_.route_tree(sample.to_csr(), check_input=False)
                               .leaf_ids, return_counts=True)
            counts = dict(zip(ids.tolist(), n.tolist(), strict=True))
        for nid, v in self.nodes_.items():
            v.arrived = 0.0
            v.refit_rows = counts.get(nid, 0)

    def _youth(self) -> int | None:
        """Y, the events of the stream's youth (:func:`~streammom.refit_budget.youth_events`);
        None when the youth ended before the last refit (its spend already counts it)."""
        y = youth_events(self.max_leaves, self.reservoir_size)
        return y if self.n_events_seen_ - self._events_since_refit <= y else None

    def _close_youth(self) -> None:
        """At the first refit past the stream's youth, forfeit what the young stream left of
        its allowance (:func:`~streammom.refit_budget.spent_past_youth`): one step in the
        spend, from the counts alone, so a restored or replayed engine takes it at the same
        refit."""
        y = self._youth()
        if y is not None and self.n_events_seen_ > y:
            assert self.n_features_ is not None
            self._refit_spent = spent_past_youth(self._refit_spent, self.refit_budget, y,
                                                 self.max_leaves, self.n_features_)

    def _refit_cost(self, *, light: bool) -> float:
        """The estimated cost of a full (or a light) refit of the tree now, in events of
        ingest (:mod:`streammom.refit_budget`). The provisional splits of the growth floor
        (two nodes each) are not counted: they live only while a young tree is below half its
        leaf budget, and counted they would move the refit schedule of the whole stream
        (:meth:`streammom.refit.RefitPass._grow_to_floor`)."""
        assert self.n_features_ is not None
        nodes = len(self.nodes_) - 2 * sum(FLOOR_MARK in v.quality for v in self.nodes_.values())
        return (light_refit_cost_events(nodes) if light
                else refit_cost_events(nodes, self.n_features_))

    def _in_light_burst(self) -> bool:
        """Whether a light refit of the tree now fits the light refits' own burst
        (:func:`streammom.refit_budget.light_refit_burst`)."""
        return (self._light_burst_spent + self._refit_cost(light=True)
                <= light_refit_burst(self.max_leaves))

    def next_refit_is_light(self) -> bool:
        """Whether a refit the policy runs now (:meth:`refit` with ``light=None``) is light —
        the refinement alone, which needs no moment sums (a helper process is not worth the
        state's trip): ``refit_every="auto"`` with ``em`` and the budget not yet affording a
        full refit (on a tree of one leaf a light refit has nothing to refine: the tree waits
        for the full refit the budget affords, as it would have). A refit the time trigger
        (``refit_every_seconds``, outside the budget) calls for is full."""
        elapsed = self._decay.since_refit()
        timed = (self.refit_every_seconds is not None and elapsed is not None
                 and elapsed >= self.refit_every_seconds)
        return (not timed and self.refit_every == "auto" and self.em
                and self.n_features_ is not None
                and self.n_events_seen_ < self._affordable_at(light=False))

    def _refit_interval(self) -> int:
        """Events between refits. The growth schedule: the first refit after
        ``first_refit`` events, then one each time the stream has grown by half since the
        last (as many refits as factors of 1.5, whatever the batch size); an int
        ``refit_every`` caps it; ``"auto"`` caps it at half_life/4 under forgetting counted
        in events (the sums move ~16 % a quarter half-life) and leaves the pace to the cost
        budget (:meth:`refit_due_events`). Counts and the tree only, never a clock."""
        assert self.refit_every is not None
        if self.refit_every == "auto":
            cap = (max(1, int(self.half_life / 4))
                   if self.half_life is not None and self.half_life_unit == "events"
                   else None)
        else:
            cap = int(self.refit_every)
        growth = None
        if self.first_refit is not None:
            seen_at_last_refit = self.n_events_seen_ - self._events_since_refit
            growth = max(self.first_refit, seen_at_last_refit // 2)
        bounds = [x for x in (cap, growth) if x is not None]
        return min(bounds) if bounds else 1  # auto, no schedule: paced by the budget alone

    # ------------------------------------------------------------------ hot path
    def _accumulate(self, X: sp.csr_array, w: np.ndarray, leaf_ids: np.ndarray) -> None:
        """Add a routed chunk to every node on its paths (design §3, §5).

        Rows are sorted by leaf (DFS rank), so every node's rows are one contiguous slice. Per
        node: reservoir offers (with the weight before the chunk), then W, s, T1–T3 and T from
        one compiled pass over the slice; C only at leaves.
        """
        layout = self._layout
        n_leaves = layout.n_leaves
        rank = layout.rank[leaf_ids]
        # Leaf ranks are small: an 8- or 16-bit key makes numpy's stable sort a radix sort, O(n).
        key = rank.astype(np.uint8 if n_leaves <= 256 else
                          np.int16 if n_leaves <= 32767 else np.int64)
        perm = np.argsort(key, kind="stable")
        Xs = X[perm]
        Xs.has_sorted_indices = True
        ws = w[perm]
        bounds = np.searchsorted(rank[perm], np.arange(n_leaves + 1), side="left")
        lengths = row_sums(Xs) if self.family_ == "multinomial" else None
        batch = self._batch_counter
        self._batch_counter += 1
        for nid, r0, r1 in layout.spans:
            a, b = int(bounds[r0]), int(bounds[r1])
            if a == b:
                continue
            v = self.nodes_[nid]
            wv = ws[a:b]
            added = float(wv.sum())
            v.fresh += added
            if v.is_leaf:
                v.arrived += added
            rng = np.random.default_rng([self.random_state, nid, batch])
            v.reservoir.offer(Xs, wv, v.acc.weight, rng, start=a)
            v.acc.add_rows(Xs, ws, a, b, second=v.is_leaf, lengths=lengths)

    # ------------------------------------------------------------------ refit
    def _weight_true(self, v: Node) -> float:
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

    def _full_second(self, nid: int) -> Packed:
        """The C of a node: its own (leaf) or offset + descendants' (design §3), as rows when
        all of them are held as rows (:meth:`subtree_rows`), else packed."""
        v = self.nodes_[nid]
        assert v.acc.C is not None
        rows = self.subtree_rows(nid)
        if rows is not None:
            return rows
        if v.is_leaf:
            return dense(v.acc.C)
        out = v.acc.C.copy() if isinstance(v.acc.C, np.ndarray) else v.acc.C.to_dense()
        for desc in subtree(self.nodes_, nid)[1:]:
            c = self.nodes_[desc].acc.C
            assert c is not None
            add_into(out, c)
        return out

    def subtree_rows(self, nid: int) -> RowGram | None:
        """A node's full C as rows — its own and its descendants' row blocks, shared — when
        :meth:`rows_sum` of its subtree allows; else None (assemble it packed)."""
        return self.rows_sum(subtree(self.nodes_, nid))

    def rows_sum(self, node_ids: list[int]) -> RowGram | None:
        """The sum of these nodes' C as rows (their row blocks, shared) when every one of them
        is held as rows and together they are under :func:`~streammom.rowgram.rows_limit`;
        else None (sum them packed)."""
        assert self.n_features_ is not None
        rows = [c for n in node_ids if isinstance(c := self.nodes_[n].acc.C, RowGram)]
        if len(rows) < len(node_ids) or sum(c.nnz for c in rows) > rows_limit(self.n_features_):
            return None
        return RowGram.concat(rows, self.n_features_)

    def _pool(self) -> PackedBufferPool:
        assert self.n_features_ is not None
        size = self.n_features_ * (self.n_features_ + 1) // 2
        pool = self._buffers
        if pool is None or pool.size != size:
            pool = self._buffers = PackedBufferPool(size)
        return pool

    def _delete_nodes(self, node_ids: list[int]) -> None:
        """Remove nodes; their C buffers go back to the pool."""
        for nid in node_ids:
            C = self.nodes_.pop(nid).acc.C
            if isinstance(C, np.ndarray):
                self._pool().release(C)

    def _drop_subtree_below(self, v: Node) -> list[int]:
        removed = [nid for c in v.children for nid in subtree(self.nodes_, c)]
        self._delete_nodes(removed)
        v.children = []
        v.router = None
        v.discriminators = None
        return removed

    def _follow_vocabulary(self) -> list[dict[str, Any]]:
        """Give the rarest columns of a full vocabulary to frequent candidate tokens (design
        §2 "vocabulary"): the vocabulary's counts decay like the sums, it plans the swaps
        (:meth:`~streammom.vocab.Vocabulary.plan_recycling`), every node's sums, reservoir
        rows and router weights of those columns are removed
        (:func:`~streammom.tree.remove_tree_columns`), then the columns get their new tokens.
        Bernoulli sums only (single-topic sums cannot drop a token exactly). Returns the
        lineage record of the swap (it changes the model's feature names: a new version)."""
        vocab = self.vocabulary
        if vocab is None or not vocab.is_full or self.family_ != "bernoulli":
            return []
        elapsed = self._decay.since_refit()
        if self.half_life is not None and elapsed:
            vocab.decay(float(np.exp2(-elapsed / self.half_life)))
        swaps = vocab.plan_recycling()
        if not swaps:
            return []
        assert self.n_features_ is not None
        columns = np.array(sorted(c for c, _ in swaps if c < self.n_features_), dtype=np.int64)
        tokens = vocab.tokens
        dropped = [tokens[c] for c, _ in swaps]
        remove_tree_columns(self.nodes_, columns)
        vocab.recycle(swaps)
        root = self.nodes_[self.root_id_]
        return [{"event": "recycle", "node": self.root_id_, "children": list(root.children),
                 "version": -1, "n_events": self.n_events_seen_,
                 "weight": float(self._weight_true(root)), "columns": len(swaps),
                 "admitted": [t for _, t in swaps[:10]], "evicted": dropped[:10]}]

    def refit(self, *, light: bool | None = False) -> list[dict[str, Any]]:
        """Recompute splits top-down, re-split / prune / split (design §5); lineage records.

        Callable by hand (a full refit; ``light=True`` a light one); the policy calls it every
        ``refit_every`` events and/or ``refit_every_seconds`` of event time with
        ``light=None``: with ``refit_every="auto"`` and ``em``, a refit the cost budget cannot
        afford yet in full is then a *light* one — the refinement alone
        (:func:`streammom.refine.refine_routers` with ``light=True``: the leaves' sums' steps
        over the reservoirs from the tree's partition, no d × d work), charged
        :func:`~streammom.refit_budget.light_refit_cost_events`, so the routers and the
        leaves' scores keep following the sums of a long stream at a small share of the cost.
        Returns this refit's lineage records (empty when nothing changed).
        """
        t0 = time.perf_counter()
        light = self.next_refit_is_light() if light is None else light and self.em
        with threadpool_limits(limits=REFIT_BLAS_THREADS, user_api="blas"):
            records = self._refit(light=light)
        self.n_refits_ += 1
        self.n_light_refits_ += int(light)
        self.last_refit_light_ = light
        self._events_since_refit = 0
        self._decay.refit_at = self._decay.now
        self.last_refit_time_ = self._decay.now
        self.last_refit_duration_ = time.perf_counter() - t0
        return records

    def _refit(self, *, light: bool) -> list[dict[str, Any]]:
        """:meth:`refit`'s work on the tree, its lineage records."""
        records: list[dict[str, Any]] = []
        if self.n_features_ is not None and self.nodes_:
            for v in self.nodes_.values():  # one block a node: products sum in one order
                if isinstance(v.acc.C, RowGram):  # however the rows arrived (rowgram docs)
                    v.acc.C.compact()
            records = self._follow_vocabulary()
            eigen = NodeEigensolver(self.random_state, self.basis_dim, self.family_,
                                    self._scratch)
            moved = self.stream_moved()
            refit_pass = RefitPass(self, eigen, moved=not light and moved)
            records += refit_pass.run_light() if light else refit_pass.run()
            if records:
                self.model_version_ += 1
                for rec in records:
                    rec["version"] = self.model_version_
                self.lineage_.extend(records)
                if len(self.lineage_) > self.max_lineage:
                    del self.lineage_[: len(self.lineage_) - self.max_lineage]
            self._rebuild_model()
            self._sample_shares()
            self._moved_at_last_refit = moved
            if self.refit_every == "auto":
                self._close_youth()
            if light and self._in_light_burst():
                self._light_burst_spent += self._refit_cost(light=True)
            else:
                self._refit_spent += (self._refit_cost(light=light) + sample_search_cost_events(
                    refit_pass.sample_search_work))
        return records

    # ------------------------------------------------------------------ merge
    def merge(self, other: StreamingHierarchy) -> StreamingHierarchy:
        """Add another engine's sums (same model version and tree; exact, design §3); self."""
        return merge_into(self, other)

    def fork(self) -> StreamingHierarchy:
        """The same engine with empty sums: forks learn shares, :meth:`merge` adds them."""
        return fork_of(self)

    # ------------------------------------------------------------------ snapshots
    def to_archive(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Manifest (schema, config, tree, lineage, counters, vocabulary) + arrays
        (:func:`streammom.engine_archive.engine_to_archive`)."""
        return engine_to_archive(self)

    @classmethod
    def from_archive(
        cls, manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
    ) -> StreamingHierarchy:
        """Rebuild an engine from :meth:`to_archive` output; the archive is validated first
        (:func:`streammom.engine_archive.engine_from_archive`)."""
        return engine_from_archive(cls, manifest, arrays)

    def snapshot(self) -> bytes:
        """Deterministic archive bytes of the whole engine state (never pickle)."""
        return archive_bytes(*self.to_archive(), compresslevel=1)

    @classmethod
    def restore(cls, data: bytes) -> StreamingHierarchy:
        """Inverse of :meth:`snapshot`; continuing the restored engine replays byte for byte."""
        return cls.from_archive(*read_archive(data))
