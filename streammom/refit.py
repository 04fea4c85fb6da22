"""One refit of the streaming engine: recompute splits top-down, re-split / prune / split.

Design §5. A :class:`RefitPass` runs once per :meth:`StreamingHierarchy.refit
<streammom.engine.StreamingHierarchy.refit>`:

1. **plan** (post-order): every internal node whose sums changed enough (``fresh`` weight ≥
   f × its weight, f backing off after stable refits) recomputes its split from its full
   second moment — assembled here, bottom-up, only where needed — with the previous
   discriminators as reference (child order and ids stay stable), and gets a plan:
   :class:`~streammom.tree.Update` (router replaced in place), :class:`~streammom.tree.Resplit`
   (more than ``resplit_threshold`` of its reservoir changes child, and the new split's
   log-likelihood gain on it is above the current routing's: rebuild the subtree),
   :class:`~streammom.tree.Stale` (the data no longer support a split) or
   :class:`~streammom.tree.Prune` (a child's decayed weight fell below ``prune_fraction``);
2. **apply** (top-down): a parent's re-split or prune overrides its descendants' plans;
3. **grow**: leaves heavy enough split, the largest log-likelihood gain first (then a
   re-split's new children, with the leaf budget left over), while depth
   and leaf budget allow and the split quality floors hold (design §4 "split quality"); with
   ``em`` on, each split made is refined by a 2-component EM on the leaf's reservoir. Then
   the *growth floor*, after the refinement (4.): a tree left with fewer than
   ⌈``max_leaves`` / 2⌉ leaves while some leaves stop for want of rows or weight, or for
   moments that give no split, lets those split from :data:`FLOOR_SPLIT_ROWS` rows on (from
   the rows alone where the moments give none), up to that many leaves, and refines
   again for their scores (a stream of 60–300 events asked for 8–32 leaves otherwise ends
   below half of them; growing the whole budget from so few rows labels worse). Its splits
   are provisional and change no other router (:meth:`RefitPass._grow_to_floor`);
4. **refine** (``em``): EM over the leaves' mixture with its spectral restart, then MAP
   routers (:mod:`streammom.refine`).

Each change appends a lineage record; the caller bumps the model version when any exists.
Children start from the parent's reservoir routed by the new split, scaled to its weight; a
re-split's subtree from the reservoirs of the leaves it replaces (:meth:`RefitPass._subtree_rows`).

Cost is bounded and does not grow with the stream: internal C's are assembled bottom-up only
where needed (one add per node); the top eigenpairs of M2 come from a block Krylov–Rayleigh–
Ritz solve warm-started from the node's tracked basis (C unpacked once into a float32 matrix,
then a few ``sgemm`` products, never a d×d eigendecomposition; residuals ≤ 1e-3·θ₁, well
inside the ``basis_tol`` the tracked basis tolerates); ``compute_split`` then gets M2 as a
:class:`~streammom.decompose.KnownSpectrumOperator` carrying exactly those eigenpairs (no
second solve); the basis is rebased only when the top-2 eigenvectors leave its span; a new
child's basis is a few block Krylov steps on its reservoir rows from the parent's basis; the
d(d+1)/2 temporaries come from a small pool of reused buffers.
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streammom._validation import with_int32_indices
from streammom.decompose import KnownSpectrumOperator
from streammom.eigen import NodeEigensolver, complete_basis
from streammom.estimators import NodeMoments
from streammom.model import FLOOR_MARK, FLOOR_SPLIT_ROWS, Router
from streammom.packed import Packed, SparsePacked, SymmetricMatrix, add_into, dense
from streammom.refine import (
    data_split,
    gains_significantly,
    principal_bisection,
    refine_routers,
    split_gain,
    split_gain_rows,
)
from streammom.reservoir import Reservoir
from streammom.rowgram import RowGram
from streammom.split import Split, compute_split, refine_split_em
from streammom.tree import Node, Plan, Prune, Resplit, Stale, Update, subtree

if TYPE_CHECKING:
    from streammom.engine import StreamingHierarchy

#: Rows (CSR) and the weight each stands for: a rebuilt subtree's sample of its node's events.
RowPool = tuple[sp.csr_array, np.ndarray]

__all__ = ["FLOOR_SPLIT_ROWS", "RESPLIT_Z", "RefitPass", "reservoir_row_weight",
           "split_weight_threshold"]

#: A re-split must beat the node's current routing by this many standard errors of the
#: per-row gain difference on the node's reservoir (one-sided paired z-test, ~2.3 % false
#: re-splits on a stationary node): :meth:`RefitPass._resplit_gains`.
RESPLIT_Z = 2.0

#: The stop reasons of the leaves the growth floor may split (:meth:`RefitPass._grow_to_floor`):
#: too few rows or too little weight, or moments that give no split (the floor then splits
#: from the rows alone: :func:`streammom.refine.data_split`).
FLOOR_WAITS = ("min_reservoir", "min_split_weight", "moments", "short_documents")

#: Significant bits of the weight a reservoir row stands for when children are built from a
#: reservoir (:func:`reservoir_row_weight`).
ROW_WEIGHT_BITS = 21

#: A split candidate on the growth heap: (−gain, node id, share of rows sent right, split).
Candidate = tuple[float, int, float, Split]


def reservoir_row_weight(weight: float, n: int) -> float:
    """The weight each of a node's ``n`` reservoir rows stands for when its children start
    from them: ``weight / n`` rounded to :data:`ROW_WEIGHT_BITS` significant bits.

    The parent keeps the offset C_full − Σ children's C and the children add their events
    from then on, so the parent's full C (offset + children's sums) equals its events' C to
    the bit only if none of these sums rounds. W/n is often not a short binary fraction: a
    reservoir size that is not a power of two, or a node born from a full reservoir (rows
    worth W/K each) that splits again before its own reservoir fills (W = r·k + m over
    k + m rows); the rounding of its products then left a few pairs of the assembled C off
    by ulps while W and s — summed at every node directly — stayed exact. Rounded to 21
    bits (a relative change below 10⁻⁶, far inside the reservoir's sampling error), with 0/1
    or count rows and no forgetting each row weight is ≥ 1 and a multiple of 2⁻²⁰, and so
    is every sum: exact while below 2³³.

    >>> reservoir_row_weight(500.0, 256), reservoir_row_weight(334.359375, 240) * 2**20 % 1
    (1.953125, 0.0)
    """
    m, e = np.frexp(weight / n)
    return float(np.ldexp(np.round(np.ldexp(m, ROW_WEIGHT_BITS)), int(e) - ROW_WEIGHT_BITS))


def _moment_side(D: np.ndarray, X: Any) -> np.ndarray:
    """The side of each row under the moment split with discriminators D (argmax_j |⟨d_j, x⟩|,
    thesis eq. 6.11): re-splits compare moment splits, whatever refinement routes by."""
    return Router(D, np.zeros(2), absolute=True).side(X)


def _lighter_share(side: np.ndarray) -> float:
    """The lighter child's share of rows sent to sides ``side`` (0 without rows)."""
    if not side.size:
        return 0.0
    right = float(side.mean())
    return min(right, 1.0 - right)


def split_weight_threshold(min_split_weight: float, stream_weight: float, max_leaves: int,
                           min_reservoir_split: int) -> float:
    """The weight a leaf needs to split in this refit: ``min_split_weight``, or on a stream too
    short for ``max_leaves`` leaves of that weight the average leaf's share of it, W / L,
    floored by ``min_reservoir_split`` (the rows a split is computed from).

    threshold = min(w_min, max(r_min, W / L)). A stream of 101 events asked for 7 leaves
    (W / L ≈ 14) lets leaves of 32 split where a fixed 50 stops at three leaves; from
    L × w_min events on, it is ``min_split_weight`` unchanged.

    >>> split_weight_threshold(50.0, 101.0, 7, 32), split_weight_threshold(50.0, 1e6, 7, 32)
    (32.0, 50.0)
    """
    return min(min_split_weight, max(float(min_reservoir_split), stream_weight / max_leaves))


class RefitPass:
    """One refit over an engine's tree (module docstring); :meth:`run` returns the lineage
    records of the changes (``version`` -1: the caller stamps the new model version)."""

    def __init__(self, engine: StreamingHierarchy, eigen: NodeEigensolver, *,
                 moved: bool = False) -> None:
        self.eng = engine
        self.eigen = eigen
        self.records: list[dict[str, Any]] = []
        self.touched: set[int] = set()  # nodes created or restructured: not split again
        self.regrow: set[int] = set()  # children of a re-split: grown with the budget left
        self.pools: dict[int, RowPool] = {}  # a rebuilt subtree's rows, by node to be split
        self.undone: set[int] = set()  # growth-floor splits undone: grown again at once
        self.plans: dict[int, Plan] = {}
        self.root_recomputed = False  # the root's moment split was recomputed in this pass
        self.floor_rows: int | None = None  # rows a split needs under the growth floor
        self.moment_stops: dict[int, str] = {}  # leaves the floor splits from rows: why not
        self.moved = moved  # the stream moved since the last refit (engine.stream_moved)
        self.sample_search_work = 0  # rows × leaves the refinement searched on a sample
        self.split_weight = split_weight_threshold(
            engine.min_split_weight, engine._weight_true(engine.nodes_[engine.root_id_]),
            engine.max_leaves, engine.min_reservoir_split)

    # ------------------------------------------------------------------ driver
    def run(self) -> list[dict[str, Any]]:
        eng = self.eng
        self._plan(eng.root_id_, None)
        self._apply(eng.root_id_)
        self.plans.clear()
        n_leaves = self._grow()
        if eng.em and self._refine_due():
            self._refine()
        if self._grow_to_floor(n_leaves) and eng.em:
            self._refine()  # the floor's leaves get scores; the rest keeps its routers
        return self.records

    def run_light(self) -> list[dict[str, Any]]:
        """A light refit: the refinement alone, no moment step and no growth
        (:meth:`StreamingHierarchy.refit <streammom.engine.StreamingHierarchy.refit>`)."""
        if self.eng.em:
            self._refine(light=True)
        return self.records

    def _grow(self) -> int:
        """Split leaves while the leaf budget lasts, the one whose split adds the most
        log-likelihood first (:func:`streammom.refine.split_gain`); a new leaf becomes a
        candidate at once, so one refit grows as many levels as the data support. The children
        of a re-split come last, with the leaf budget the other leaves leave: they hold only a
        sample of the replaced subtree's rows, and the next refit grows them from their own
        events; but
        a tree is never left with fewer leaves than the budget allows because a re-split took
        its subtree (at the root: two leaves). Every leaf ends with its stop reason
        (:data:`streammom.model.STOP_REASONS`; None: it may split
        once it has new events). Returns the number of leaves."""
        eng = self.eng
        heap: list[Candidate] = []
        n_leaves = sum(1 for v in eng.nodes_.values() if v.is_leaf)
        for v in sorted(eng.nodes_.values(), key=lambda v: v.node_id):
            if not v.is_leaf:
                v.stop_reason = None
            elif n_leaves >= eng.max_leaves:  # a full tree computes no candidate split
                v.stop_reason = self._static_stop(v) or "max_leaves"
            elif v.node_id in self.undone or (v.node_id not in self.touched and self._stale(v)):
                self._offer(heap, v)  # stale, or a floor split just undone: grown again
            elif v.stop_reason in (None, "max_leaves", "first_refit"):
                v.stop_reason = self._static_stop(v)
        regrow = sorted(self.regrow)
        while n_leaves < eng.max_leaves:
            if not heap:  # the budget left over goes to the children of a re-split
                if not regrow:
                    break
                for nid in regrow:
                    if nid in eng.nodes_ and eng.nodes_[nid].is_leaf:
                        self._offer(heap, eng.nodes_[nid])
                regrow = []
                continue
            n_leaves += self._split_best(heap)
        for _, nid, _, _ in heap:  # candidates the budget ran out for
            eng.nodes_[nid].stop_reason = "max_leaves"
        return n_leaves

    def _offer(self, heap: list[Candidate], v: Node) -> None:
        """Push leaf ``v``'s split candidate on ``heap``, or set its stop reason."""
        v.stop_reason = self._static_stop(v)
        found = None if v.stop_reason else self._leaf_split(v)
        if found is not None:
            gain, split, right = found
            heapq.heappush(heap, (-gain, v.node_id, right, split))

    def _split_best(self, heap: list[Candidate], *, floor: bool = False) -> int:
        """Make the best candidate's split (its EM first) and offer its children: the leaves
        added, 1, or 0 when the refined split spawns no children. ``floor``: a split of the
        growth floor, marked (:data:`FLOOR_MARK`) and recorded as such."""
        eng = self.eng
        _, nid, right, split = heapq.heappop(heap)
        v = eng.nodes_[nid]
        split, right = self._split_em(v, split, right)
        if self._spawn_children(v, split, v.acc.C) is None:
            v.stop_reason = "moments"
            return 0
        v.stop_reason = None
        if floor:
            v.quality[FLOOR_MARK] = 1.0
        self._record("split", v, child_share=[1.0 - right, right],
                     **({FLOOR_MARK: True} if floor else {}))
        for c in v.children:
            self._offer(heap, eng.nodes_[c])
        return 1

    def _grow_to_floor(self, n_leaves: int) -> bool:
        """The growth floor (module docstring, 3.): while the tree has fewer than
        ⌈``max_leaves`` / 2⌉ leaves and some leaves stop for want of rows or weight
        (``min_reservoir``, ``min_split_weight``) or because their moments give no split
        (``moments``, ``short_documents``: :data:`FLOOR_WAITS`), those leaves may split from
        :data:`FLOOR_SPLIT_ROWS` rows on, the largest gain first, up to that many leaves; a
        leaf whose moments give none splits from its rows alone
        (:func:`streammom.refine.data_split`: principal bisection, then a 2-component EM) and
        keeps its moments' stop reason if it is not split. Every other floor (depth, split
        quality, one-sided children) holds. True when it
        split a leaf: the refit then refines again, and that refinement gives every leaf its
        score but changes only the floor's routers.

        The floor shapes the labels, never what the rest of the tree learns. Its splits carry
        :data:`FLOOR_MARK` in their quality and lineage record and are provisional: the next
        refit undoes them (a prune recorded with the mark; the node's own sums hold every
        event its children took) and grows the tree again; and the other routers keep the
        refinement made before the floor grew, so between refits the stream reaches the
        rest of the tree as it would without the floor. On long streams fed in batches of
        100, floor splits kept until the node had the rows to split, or undone but with the
        whole tree's routers refined alongside them, fixed the young tree's structure from
        8–30 rows and labelled worse (BENCHMARKS.md "A growth floor of half the leaf
        budget")."""
        eng = self.eng
        floor = self._half_budget()
        waiting = [v for v in eng.nodes_.values() if v.is_leaf and v.stop_reason in FLOOR_WAITS]
        if n_leaves >= floor or not waiting:
            return False
        grown = n_leaves
        self.floor_rows = min(FLOOR_SPLIT_ROWS, eng.min_reservoir_split)
        heap: list[Candidate] = []
        for v in sorted(waiting, key=lambda v: v.node_id):
            self._offer(heap, v)
        while n_leaves < floor and heap:
            n_leaves += self._split_best(heap, floor=True)
        self.floor_rows = None
        waited = {v.node_id for v in waiting}
        for v in eng.nodes_.values():  # the floor's leaves say why a split waits: its bounds
            floor_child = v.parent in eng.nodes_ and FLOOR_MARK in eng.nodes_[v.parent].quality
            if v.is_leaf and (v.node_id in waited or floor_child):
                v.stop_reason = (self._static_stop(v) or self.moment_stops.get(v.node_id)
                                 or v.stop_reason)
        return n_leaves > grown

    def _half_budget(self) -> int:
        """⌈``max_leaves`` / 2⌉: the leaves the growth floor grows and the scores label."""
        return -(-self.eng.max_leaves // 2)

    def _static_stop(self, v: Node) -> str | None:
        """The stop reason a leaf has before any split is computed, or None."""
        eng = self.eng
        if v.depth >= eng.max_depth:
            return "max_depth"
        if self.floor_rows is not None:  # the growth floor's bounds (:meth:`_grow_to_floor`)
            return "min_reservoir" if len(v.reservoir) < self.floor_rows else None
        if eng._weight_true(v) < self.split_weight:
            return "min_split_weight"
        if len(v.reservoir) < eng.min_reservoir_split:
            return "min_reservoir"
        return None

    def _refine_due(self) -> bool:
        """Refine after the tree changed or the root's split was recomputed: the root's
        freshness schedule (new weight ≥ f × its weight, f backing off while stable) paces
        the refinement too, so its cost shrinks as the stream settles."""
        return self.root_recomputed or any(
            r["event"] in ("split", "re-split", "prune") for r in self.records)

    def _refine(self, *, light: bool = False) -> None:
        """Likelihood refinement of the routers and the leaves' scores (:mod:`streammom.refine`);
        without a refinement (nothing to refine) no leaf keeps a score, so the model labels by
        the routers."""
        eng = self.eng
        refined = refine_routers(eng.nodes_, eng.root_id_, eng.family_,
                                 max_iter=eng.em_max_iter, random_state=eng.random_state,
                                 n_events=eng.n_events_seen_, weight_scale=eng._scale(),
                                 light=light, min_labelled=self._half_budget(),
                                 sample=(eng.nodes_[eng.root_id_].reservoir.to_csr()
                                         if self.moved else None))
        scores = {} if refined is None else refined.scores
        self.sample_search_work += 0 if refined is None else refined.sample_search_work
        rescored = [nid for nid, v in eng.nodes_.items()
                    if (v.score is None) != (scores.get(nid) is None)
                    or (v.score is not None and not v.score.same_as(scores.get(nid)))]
        for nid, v in eng.nodes_.items():
            v.score = scores.get(nid)
        # with growth-floor splits in the tree, only their routers change: the rest of the
        # tree routes the stream as it would without them (:meth:`_grow_to_floor`)
        floor = {nid for nid, v in eng.nodes_.items() if FLOOR_MARK in v.quality}
        changed = [] if refined is None else [
            nid for nid, r in refined.routers.items()
            if (not floor or nid in floor) and not r.same_as(eng.nodes_[nid].router)]
        for nid in changed:
            eng.nodes_[nid].router = refined.routers[nid]  # type: ignore[union-attr]
        if changed or rescored:
            root = eng.nodes_[eng.root_id_]
            fit = {} if refined is None else {
                "em_iterations": refined.n_iter, "em_converged": refined.converged,
                "em_rows": refined.n_rows, "em_restarted": refined.restarted}
            self._record("refine", root, nodes=changed, scored=sorted(rescored), light=light,
                         **fit)

    # ------------------------------------------------------------------ decisions
    def _stale(self, v: Node) -> bool:
        """Enough new weight since the node's last refit (f doubles per stable refit)."""
        eng = self.eng
        frac = min(eng.refit_min_new_fraction * 2.0**v.backoff,
                   max(eng.refit_max_new_fraction, eng.refit_min_new_fraction))
        return v.fresh > 0 and v.fresh >= frac * v.acc.weight

    def _quality_ok(self, split: Split) -> bool:
        """Split-quality floors (design §4): G eigen-gap and the λ₂ − λ₃ gap of M2."""
        q = split.quality
        return (q.get("rotation_gap", 0.0) >= self.eng.min_rotation_gap
                and q.get("spectral_gap", 0.0) >= self.eng.min_spectral_gap)

    def _record(self, event: str, v: Node, **extra: Any) -> None:
        rec: dict[str, Any] = {
            "event": event,
            "node": v.node_id,
            "children": list(v.children),
            "version": -1,
            "n_events": self.eng.n_events_seen_,
            "weight": float(self.eng._weight_true(v)),
        }
        rec.update(extra)
        self.records.append(rec)

    # ------------------------------------------------------------------ plan (post-order)
    def _plan(self, nid: int, into: np.ndarray | None) -> None:
        """Assemble full packed C where needed and plan each internal node's refit.

        An internal node's C is its offset plus its children's full C (design §3). A node that
        needs its own full C (stale or pruned) sums its subtree into a fresh buffer; any other
        node adds its offset and its children straight into the buffer of the nearest
        ancestor that needs one (``into``), so the temporaries are one buffer per stale node on
        the current path and untouched subtrees cost nothing.
        """
        eng = self.eng
        v = eng.nodes_[nid]
        assert v.acc.C is not None
        if v.is_leaf:
            if into is not None:
                add_into(into, v.acc.C)
            return
        W = eng._weight_true(v)
        kid_w = [eng._weight_true(eng.nodes_[c]) for c in v.children]
        # a split the growth floor made is provisional: undone at the next refit, which grows
        # the tree again from the sums it has then (:meth:`_grow_to_floor`)
        prune = (W <= 0 or min(kid_w) < eng.prune_fraction * W
                 or FLOOR_MARK in v.quality)
        stale = self._stale(v)
        if not (prune or stale):
            if into is not None:
                add_into(into, v.acc.C)
            for c in v.children:
                self._plan(c, into)
            return
        pool = eng._pool()
        full: Packed | None = eng.subtree_rows(nid)
        if full is not None:  # held as rows: nothing to assemble (the children plan alone)
            for c in v.children:
                self._plan(c, None)
            if into is not None:
                add_into(into, full)
        else:
            if isinstance(v.acc.C, np.ndarray):
                full = pool.copy_of(v.acc.C)
            else:
                full = pool.zeros()
                add_into(full, v.acc.C)
            for c in v.children:
                self._plan(c, full)
            if into is not None:
                into += full
        if prune:
            self.plans[nid] = Prune(full, kid_w)
        else:
            self._plan_stale(v, full)
        if isinstance(full, np.ndarray) and not isinstance(self.plans.get(nid), Prune | Resplit):
            pool.release(full)

    def _plan_stale(self, v: Node, full: Packed) -> None:
        eng = self.eng
        self.root_recomputed |= v.node_id == eng.root_id_
        split = self._node_split(v, full, v.discriminators)
        v.fresh = 0.0
        if split is None:
            return
        if not self._quality_ok(split):
            self.plans[v.node_id] = Stale()
            return
        X = v.reservoir.to_csr()
        share = (float(np.mean(_moment_side(v.discriminators, X)
                               != _moment_side(split.discriminators, X)))
                 if X.shape[0] and v.discriminators is not None else 0.0)
        if share > 0.5:  # the same split with its children the other way round (the
            split, share = split.swapped(), 1.0 - share  # reference did not fix the order)
        if share > eng.resplit_threshold:
            if not self._resplit_gains(v, split.router, X):
                return  # no better than the routing it would replace: the subtree and its
                # back-off schedule stay as they were (no plan: nothing in the model changed)
            self.plans[v.node_id] = Resplit(split, full, share)
        else:
            self.plans[v.node_id] = Update(split, share)
        # Back off on a node whose split did not move (design §5: skip nodes whose sums
        # barely changed); any real change resets the schedule.
        v.backoff = min(v.backoff + 1, 30) if share <= eng.stable_share else 0

    def _resplit_gains(self, v: Node, router: Router, X: Any) -> bool:
        """Whether the recomputed split (its ``router``) explains the node's reservoir rows
        ``X`` significantly better than the routing it would replace: per row, its
        classification log-likelihood gain (:func:`streammom.refine.split_gain_rows`) against
        that of the node's current router, by a one-sided paired z-test at
        :data:`RESPLIT_Z` (:func:`streammom.refine.gains_significantly`). A re-split discards
        the whole subtree (its children restart from this node's reservoir), so a split that
        only differs — two near-equal top eigenvalues of M2 swap places as the sums grow, as
        on 20 Newsgroups' root, or a reservoir's sampling noise — is not reason enough;
        drift, which the reservoir follows first, is (z 3–25 on the drift tests' decisive
        re-splits, against |z| < 2 for most of 20 Newsgroups' stationary ones: BENCHMARKS.md
        "Re-splits that gain significantly")."""
        assert v.router is not None
        family = self.eng.family_
        return gains_significantly(split_gain_rows(X, router.side(X), family),
                                   split_gain_rows(X, v.router.side(X), family), RESPLIT_Z)

    # ------------------------------------------------------------------ apply (top-down)
    def _apply(self, nid: int) -> None:
        eng = self.eng
        v = eng.nodes_[nid]
        if v.is_leaf:
            return
        plan = self.plans.get(nid)
        if isinstance(plan, Prune):
            kept = self._prune_survivor(v, plan)
            if kept is not None:
                self._apply(kept.node_id)  # its own plans first (it may be pruned itself)
                if not kept.is_leaf:
                    self._splice(v, kept, plan)
                    return
            removed = eng._drop_subtree_below(v)
            v.acc.C = plan.full
            undone = {FLOOR_MARK: True} if FLOOR_MARK in v.quality else {}
            v.quality = {}
            self.touched.add(nid)
            if undone:
                self.undone.add(nid)
            self._record("prune", v, removed=removed,
                         child_weights=[float(x) for x in plan.child_weights], **undone)
            return
        if isinstance(plan, Stale):
            v.quality = {**v.quality, "stale_split": 1.0}
        elif isinstance(plan, Resplit):
            old_children, old_router, old_D = v.children, v.router, v.discriminators
            old_offset = v.acc.C
            removed = [n for c in old_children for n in subtree(eng.nodes_, c)]
            pool = (self._subtree_rows(v, old_children)
                    if self.moved and eng.half_life is None else None)
            if pool is not None:
                self.pools[nid] = pool  # _spawn_children takes it
            v.children = []
            v.acc.C = plan.full
            kids = self._spawn_children(v, plan.split, plan.full)
            if kids is None:  # degenerate new split: keep the old subtree
                v.children, v.router, v.discriminators = old_children, old_router, old_D
                v.acc.C = old_offset
            else:
                eng._delete_nodes(removed)
                self.touched.update([nid, *kids])
                self.regrow.update(kids)
                self._record("re-split", v, removed=removed, rerouted=plan.share)
                return
        elif isinstance(plan, Update):
            v.router = plan.split.router
            v.discriminators = plan.split.discriminators
            q = {k: float(x) for k, x in plan.split.quality.items()}
            q["rerouted"] = plan.share
            v.quality = q
            self._record("update", v, rerouted=plan.share)
        for c in list(v.children):
            self._apply(c)

    def _prune_survivor(self, v: Node, plan: Prune) -> Node | None:
        """The child a prune keeps: the heavier one, when the node has weight; None when the
        whole subtree goes (no weight left)."""
        if max(plan.child_weights) <= 0:
            return None
        heavy = int(np.argmax(plan.child_weights))
        return self.eng.nodes_[v.children[heavy]]

    def _splice(self, v: Node, kept: Node, plan: Prune) -> None:
        """Prune v by promoting its heavy internal child ``kept``: kept's children become v's,
        with kept's router, and the light child's subtree goes (design §5 "prune").

        v's own sums (W, s, T1–T3, T, reservoir) already hold every event of both children,
        so they stay. C stays exact through v's offset: full C(v) = Σ_{u ∈ subtree(v)} C_u
        (design §3), so the offset absorbs kept's offset and every C of the light subtree,
        C_v ← C_v + C_kept + Σ_{u ∈ light} C_u, and full C(v) is unchanged. The promoted
        subtree keeps its sums, reservoirs and routers: merging back a small child no longer
        discards the large subtree beside it (a prune of a 2 % leaf on 20 Newsgroups
        dropped the 13 leaves of its sibling and regrew them from 1,024 reservoir rows,
        ARI 0.31 → 0.08)."""
        eng = self.eng
        light = [n for c in v.children if c != kept.node_id for n in subtree(eng.nodes_, c)]
        ids = [v.node_id, kept.node_id, *light]
        offset: Packed | None = eng.rows_sum(ids)
        if offset is None:  # packed: into v's own buffer when it is one
            own = isinstance(v.acc.C, np.ndarray)
            offset = v.acc.C if own else eng._pool().zeros()
            for n in ids[1:] if own else ids:
                add_into(offset, eng.nodes_[n].acc.C)
        if isinstance(plan.full, np.ndarray) and plan.full is not offset:
            eng._pool().release(plan.full)
        for n in subtree(eng.nodes_, kept.node_id)[1:]:
            eng.nodes_[n].depth -= 1
        for c in kept.children:
            eng.nodes_[c].parent = v.node_id
        v.children, kept.children = kept.children, []
        v.router, v.discriminators = kept.router, kept.discriminators
        v.quality, v.backoff = dict(kept.quality), kept.backoff
        v.acc.C = offset
        eng._delete_nodes([kept.node_id, *light])
        self.touched.add(v.node_id)
        self._record("prune", v, removed=[*light, kept.node_id], promoted=kept.node_id,
                     child_weights=[float(x) for x in plan.child_weights])

    # ------------------------------------------------------------------ grow
    def _leaf_split(self, v: Node) -> tuple[float, Split, float] | None:
        """A leaf's likelihood gain, split and share of reservoir rows sent to child 1, or
        None when the split is refused (its quality signals and, if one-sided, the lighter
        child's share go to ``v.quality``)."""
        assert v.acc.C is not None
        eng = self.eng
        v.fresh = 0.0
        split = self._node_split(v, v.acc.C, None)
        short = split is None and eng.family_ == "multinomial" and (
            v.acc.t2 <= 0 or v.acc.t3 <= 0)
        reason = "short_documents" if short else "moments"
        if split is None and self.floor_rows is not None and eng.em:
            # the growth floor splits a leaf whose moments give none from its rows alone
            split = data_split(v.reservoir.to_csr(), family=eng.family_,
                               seed=eng.random_state, max_iter=eng.em_max_iter)
            self.moment_stops[v.node_id] = reason
        if split is None:
            v.stop_reason = reason
            return None
        q = split.quality
        if "data_split" not in q and not self._quality_ok(split):
            v.quality = {k: float(x) for k, x in q.items()}
            v.stop_reason = "split_quality"
            return None
        X = v.reservoir.to_csr()
        side = split.router.side(X)
        if _lighter_share(side) < eng.min_child_fraction and eng.em:
            # one-sided moment split: a 2-component EM on the reservoir, started from it, then
            # from the reservoir's principal bisection (the moments saw no balanced split)
            for start in (split, principal_bisection(split, X, eng.random_state)):
                refined = refine_split_em(start, X, family=eng.family_,
                                          max_iter=eng.em_max_iter)
                side = refined.router.side(X)
                if _lighter_share(side) >= eng.min_child_fraction:
                    break
            split = refined
        right = float(side.mean()) if side.size else 0.0
        share = min(right, 1.0 - right)
        if share < max(eng.min_child_fraction, 1e-12):
            v.quality = {k: float(x) for k, x in q.items()}
            v.quality["child_share"] = share
            v.stop_reason = "one_sided"
            return None
        return split_gain(X, side, eng.family_, eng._weight_true(v)), split, right

    def _split_em(self, v: Node, split: Split, right: float) -> tuple[Split, float]:
        """Per-split EM (thesis ch. 6 §6.3, as :class:`HierarchicalMoM` with ``em=True``) on
        the split growth applies: a 2-component EM on the leaf's reservoir rows started from
        the moment split. Run once the split is chosen (candidates are ranked by the moment
        split's gain, so EM runs once per split made, not per candidate), skipped when the
        one-sided rescue of :meth:`_leaf_split` already ran EM; a result that leaves a side
        below ``min_child_fraction`` keeps the moment split. The split and the share of
        reservoir rows it sends to child 1."""
        eng = self.eng
        if not eng.em or "em_iterations" in split.quality:
            return split, right
        X = v.reservoir.to_csr()
        refined = refine_split_em(split, X, family=eng.family_, max_iter=eng.em_max_iter)
        side = refined.router.side(X)
        if _lighter_share(side) < max(eng.min_child_fraction, 1e-12):
            return split, right
        return refined, float(side.mean())

    # ------------------------------------------------------------------ one node
    def _node_split(self, v: Node, C: Packed, reference: np.ndarray | None
                    ) -> Split | None:
        """Compute the split of a node from its sums, maintaining its tracked basis (design §3).

        The top eigenpairs of M2 come from :meth:`NodeEigensolver.top_eigenpairs` (warm
        start); if the top-2 eigenvectors left span(P) beyond ``basis_tol`` the basis moves to
        the current top-m and T is rotated and repaired from the reservoir. ``compute_split``
        then receives M2 as a cheap operator with exactly those eigenpairs (so its own
        eigensolve is nearly free). A C held as rows (:mod:`streammom.rowgram`) multiplies
        through its rows, C V = Xᵀ (w ∘ X V), on the columns they hold
        (:meth:`NodeEigensolver.rows_top_eigenpairs`), and a new T is summed from those rows —
        every event of the node with its weight, so exactly — instead of the reservoir.
        """
        eng, eigen = self.eng, self.eigen
        acc = v.acc
        if acc.weight <= 0 or (eng.family_ == "multinomial" and (acc.t2 <= 0 or acc.t3 <= 0)):
            return None
        d = acc.n_features
        m = min(eng.basis_dim, d)
        p = min(max(m, 3), d)
        try:
            # The eigen-solve runs in float32 (half the memory traffic; its tolerance is far
            # above float32 rounding); the single-topic corrections use float64 products.
            multinomial = eng.family_ == "multinomial"
            s_vec, W, T2 = acc.s, acc.weight, acc.t2
            if isinstance(C, RowGram):
                c_times = C.matmul
                vals, vecs = eigen.rows_top_eigenpairs(
                    *C.rows(), s_vec if multinomial else None, T2 if multinomial else W, p,
                    acc.basis, v.node_id)
            else:
                packed = dense(C)
                c_matmul = SymmetricMatrix(packed, d, buffer=eigen.scratch.get(d),
                                           dtype=np.float32).matmul
                c_times = SymmetricMatrix(packed, d).matmul if multinomial else None

                def m2_times(B: np.ndarray) -> np.ndarray:
                    B2 = np.asarray(B, dtype=np.float64).reshape(d, -1)
                    out = c_matmul(B2)
                    out = (out - s_vec[:, None] * B2) / T2 if multinomial else out / W
                    return out.reshape(np.shape(B))

                vals, vecs = eigen.top_eigenpairs(m2_times, d, p, acc.basis, v.node_id)
            P_new = complete_basis(vecs[:, :m], m, d, eigen.seed(v.node_id, 1))
            rebase = acc.basis is None
            if not rebase and vals[1] > 0:
                E = vecs[:, :2].T / np.sqrt(vals[:2])[:, None]
                rebase = acc.basis_residual(E) > eng.basis_tol
                eng.n_rebases_ += int(rebase)
            if rebase:
                n_res = len(v.reservoir)
                rows: Any = None
                row_weight: Any = 0.0
                if isinstance(C, RowGram):
                    rows, row_weight = C.rows()
                elif n_res:
                    rows, row_weight = v.reservoir.to_csr(), acc.weight / n_res
                acc.set_basis(P_new, rows=rows, row_weight=row_weight)
            moments = NodeMoments(
                m2=KnownSpectrumOperator(vals, vecs),
                m1=acc.first_moment(),
                third=lambda E: acc.third_slices(E, c_times=c_times),
            )
            split = compute_split(moments, family=eng.family_, method=eng.method,
                                  reference_discriminators=reference,
                                  random_state=eng.random_state)
            quality = dict(split.quality)
            assert split.whitening is not None  # compute_split's: a moment split
            quality["basis_residual"] = acc.basis_residual(split.whitening.pinv)
            return replace(split, quality=quality)
        except (ValueError, spla.ArpackNoConvergence, spla.ArpackError,
                np.linalg.LinAlgError):
            return None

    def _subtree_rows(self, v: Node, roots: list[int]) -> RowPool | None:
        """The rows a re-split of ``v`` rebuilds its subtree from: the reservoirs of the leaves
        under ``roots`` (the subtree it replaces), row i of leaf l standing for W_l / n_l of v's
        weight (scaled so the rows add up to W_v, each rounded like
        :func:`reservoir_row_weight`); None when they hold no more rows than v's own reservoir.

        A re-split used to rebuild from v's reservoir alone: at the root of a 16-leaf tree,
        1,024 rows for 16 leaves, where the leaves it replaces held up to 16 × 1,024
        (BENCHMARKS.md "A re-split rebuilds from the reservoirs of the subtree it replaces").

        Used on a refit of a moved stream (:mod:`streammom.stream_shift`) without forgetting
        only. On a stationary stream a re-split is rare and what follows it chaotic: rebuilt
        from the replaced leaves' rows, R8's arrival orders 3 and 4 fell from 0.512 and 0.562
        to 0.422 and 0.480 (partitions the likelihood prefers), debtags' orders 2 and 3 by
        0.016. Under forgetting, a subtree rebuilt from v's reservoir starts with room for new
        events, which is how the engine follows an abrupt drift; rebuilt from the replaced
        leaves' full reservoirs, a sample of the decayed stream still half the old regime,
        the drift test's tree stayed at 0.71 ARI after five half-lives (0.999 from v's)."""
        eng = self.eng
        leaves = [eng.nodes_[n] for r in roots for n in subtree(eng.nodes_, r)]
        leaves = [u for u in leaves
                  if u.is_leaf and len(u.reservoir) and u.acc.weight > 0]
        n_rows = sum(len(u.reservoir) for u in leaves)
        total = sum(u.acc.weight for u in leaves)
        if n_rows <= len(v.reservoir) or total <= 0:
            return None
        scale = v.acc.weight / total
        X = sp.vstack([u.reservoir.to_csr() for u in leaves], format="csr")
        w = np.concatenate([np.full(len(u.reservoir),
                                    reservoir_row_weight(u.acc.weight * scale, len(u.reservoir)))
                            for u in leaves])
        return with_int32_indices(X), w

    def _spawn_children(self, v: Node, split: Split, C_full: Packed) -> list[int] | None:
        """Two new leaves from v's events routed by ``split``.

        Held as rows (:mod:`streammom.rowgram`), C_full is every event of v with its weight:
        each child gets its side's rows — W, s, C, T1–T3 and T exact — and v's offset is
        empty. Otherwise the children start from v's reservoir rows scaled to v's weight
        (:func:`reservoir_row_weight`), or, in a subtree a re-split rebuilds, from the rows of
        the subtree it replaced (:meth:`_subtree_rows`: each child's reservoir a weighted draw
        of its side's, :meth:`Reservoir.from_rows <streammom.reservoir.Reservoir.from_rows>`,
        and its side's rows the pool its own children start from), and v keeps the frozen
        offset C_full − Σ children's C (design §3).
        """
        eng = self.eng
        pool = self.pools.pop(v.node_id, None)
        X = v.reservoir.to_csr()
        n = X.shape[0]
        if n == 0:
            return None
        side = split.router.side(X)
        exact = isinstance(C_full, RowGram)
        if isinstance(C_full, RowGram):
            X_all, w_all = C_full.rows()
            side_all = split.router.side(X_all)
        elif pool is not None:
            X_all, w_all = pool
            side_all = split.router.side(X_all)
        d = X.shape[1]
        kids: list[Node] = []
        pools: dict[int, RowPool] = {}
        for j in (0, 1):
            rows = np.flatnonzero(side == j)
            if pool is None and rows.size == 0:
                return None
            nid = eng._next_id + j
            child = eng._new_node(nid, v.node_id, v.depth + 1)
            if exact or pool is not None:
                mine = np.flatnonzero(side_all == j)
                if mine.size == 0:
                    return None
                Xe, we = X_all[mine], w_all[mine]
                Xe.sort_indices()
            else:
                Xe = X[rows]
                Xe.sort_indices()
                we = np.full(rows.size, reservoir_row_weight(v.acc.weight, n))
            if pool is not None:
                rng = np.random.default_rng([eng.random_state, nid, eng._batch_counter, 2])
                child.reservoir = Reservoir.from_rows(Xe, we, eng.reservoir_size, rng)
                pools[nid] = (Xe, we)
            else:
                child.reservoir = v.reservoir.subset(rows)
            Xj = child.reservoir.to_csr()
            child.acc.update(Xe, we)
            child.acc.set_basis(self.eigen.basis_from_rows(Xj, nid, d, v.acc.basis), rows=Xe,
                                row_weight=we)
            kids.append(child)
        eng._next_id += 2
        self.pools.update(pools)
        if exact:
            v.acc.C = RowGram(d)
        else:
            offset = dense(C_full)  # the leaf's own array is used up in place
            offset = offset.copy() if offset is C_full and C_full is not v.acc.C else offset
            for child in kids:
                assert child.acc.C is not None
                add_into(offset, child.acc.C, -1.0)
            # the offset is frozen until the next refit: held sparse (design §3), its buffer
            v.acc.C = SparsePacked.from_dense(offset)  # reused
            eng._pool().release(offset)
        v.children = [k.node_id for k in kids]
        v.router = split.router
        v.discriminators = split.discriminators
        v.quality = {k: float(x) for k, x in split.quality.items()}
        for k in kids:
            k.born_version = eng.model_version_ + 1
            eng.nodes_[k.node_id] = k
        return v.children
