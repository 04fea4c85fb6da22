"""Merging and forking engines (design §3 "merge"): the sums are exact sums, so engines that
routed with the same model add their partial sums — the basis of sharded learning."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from streammom.packed import SparsePacked, dense, unpack_symmetric
from streammom.reservoir import Reservoir
from streammom.rowgram import RowGram

if TYPE_CHECKING:
    from streammom.engine import StreamingHierarchy

__all__ = ["fork_of", "merge_into", "named_root_sums", "structure"]


def structure(eng: StreamingHierarchy) -> list[tuple[int, int, tuple[int, ...]]]:
    """(id, parent, children) of every node, by id: two engines merge only if equal."""
    return [(nid, v.parent, tuple(v.children)) for nid, v in sorted(eng.nodes_.items())]

def merge_into(self: StreamingHierarchy, other: StreamingHierarchy) -> StreamingHierarchy:
    """Add the sums of another engine that routed with the same model version and tree.

    Exact for W, s, C, T, T1–T3 (design §3 "merge"); reservoirs are combined by weighted
    sampling. Both engines must share the configuration, the tree, the model version and
    every node's tracked basis. Returns self.
    """
    if not isinstance(other, type(self)):
        raise TypeError("can only merge another StreamingHierarchy")
    if other.get_config() != self.get_config() or other.n_features_ != self.n_features_:
        raise ValueError("cannot merge engines with different configurations")
    if (other.family_, other._family_pending) != (self.family_, self._family_pending):
        raise ValueError(f"cannot merge engines of different families ({self.family_!r} and "
                         f"{other.family_!r}, family='auto' takes it from the first batch)")
    if other.model_version_ != self.model_version_ or structure(other) != structure(self):
        raise ValueError("cannot merge engines with different model versions or trees")
    if (self.vocabulary is None) != (other.vocabulary is None):
        raise ValueError("cannot merge an engine with a vocabulary and one without")
    if self.vocabulary is not None and other.vocabulary is not None:
        self.vocabulary.merge(other.vocabulary)  # same tokens in the same columns, or ValueError
    factor = self._decay.merge(other._decay, self.half_life)
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
        v.arrived += o.arrived * factor
    self.n_events_seen_ += other.n_events_seen_
    self._events_since_refit += other._events_since_refit
    self._refit_spent += other._refit_spent
    self._light_burst_spent += other._light_burst_spent
    self._batch_counter = max(self._batch_counter, other._batch_counter) + 1
    self._rebuild_model()
    return self

def fork_of(self: StreamingHierarchy) -> StreamingHierarchy:
    """A copy with the same config, tree, routers, bases and model version but empty sums.

    For sharded workers: each fork learns its share and :meth:`merge` adds the partials.
    """
    out = type(self).from_archive(*self.to_archive())
    for v in out.nodes_.values():
        acc = v.acc
        acc.weight = acc.t1 = acc.t2 = acc.t3 = 0.0
        acc.s[:] = 0.0
        if isinstance(acc.C, SparsePacked):
            acc.C = SparsePacked(np.zeros(0, dtype=np.int64), np.zeros(0), acc.C.size)
        elif isinstance(acc.C, RowGram):
            acc.C = RowGram(acc.n_features)
        elif acc.C is not None:
            acc.C[:] = 0.0
        if acc.T is not None:
            acc.T[:] = 0.0
        v.fresh = v.arrived = 0.0
        v.reservoir = Reservoir(self.reservoir_size, v.reservoir.n_features)
    if out.vocabulary is not None:  # the fork counts its own share of the tokens too
        out.vocabulary.reset_counts()
    out.n_events_seen_ = 0
    out._events_since_refit = 0
    out._refit_spent = 0.0
    out._light_burst_spent = 0.0
    out._rebuild_model()
    return out


def named_root_sums(
    eng: StreamingHierarchy,
) -> tuple[float, dict[str, float], dict[tuple[str, str], float]]:
    """The whole stream's weight W, first-order sums s and second-order sums C, keyed by
    feature name: ``(W, {token: s_j}, {(token_i, token_j): C_ij})`` over the non-zero entries,
    each pair's tokens sorted.

    Two engines that learned the same events — one process, or a learner fed by several
    ingest workers (design §6) — hold equal sums whatever the order, but their vocabularies
    may number the tokens differently (first come, first numbered); by name they compare
    directly. Without forgetting and with 0/1 or count rows every entry is an integer sum, so
    equal means equal to the bit.
    """
    acc = eng.node_accumulator(eng.root_id_)
    assert acc.C is not None and eng.vocabulary is not None
    names = eng.vocabulary.feature_names
    C = np.triu(unpack_symmetric(dense(acc.C), acc.s.shape[0]))
    s = {names[j]: float(acc.s[j]) for j in np.flatnonzero(acc.s)}
    ii, jj = np.nonzero(C)
    pairs: dict[tuple[str, str], float] = {}
    for i, j in zip(ii.tolist(), jj.tolist(), strict=True):
        a, b = sorted((names[i], names[j]))
        pairs[(a, b)] = float(C[i, j])
    return float(acc.weight), s, pairs
