"""On a moved stream a re-split rebuilds its subtree from the reservoirs of the subtree it
replaces (design §5 "refit"; ``RefitPass._subtree_rows``)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

from streammom import StreamingHierarchy
from streammom.datasets import make_hierarchical_bernoulli
from streammom.mixture import map_assign
from streammom.refit import RefitPass


def _codes(seed: int) -> tuple[sp.csr_array, np.ndarray, float]:
    """20,000 events of 8 clusters of hierarchical codes at d = 500, and the oracle's ARI."""
    X, y, _, truth = make_hierarchical_bernoulli(20_000, 500, 8, random_state=seed,
                                                 return_truth=True)
    X = sp.csr_array(X)
    oracle = adjusted_rand_score(y, map_assign(X, truth.prevalence, truth.leaf_weights,
                                               "bernoulli"))
    return X, y, oracle


def _stream(X: sp.csr_array) -> tuple[StreamingHierarchy, list[int]]:
    """The acceptance protocol's pass (defaults, batches of 1,000); and after every refit that
    re-split the root, the rows its leaves' reservoirs then held."""
    eng = StreamingHierarchy(X.shape[1], max_leaves=8)
    rebuilt: list[int] = []
    for start in range(0, X.shape[0], 1_000):
        before = len(eng.lineage_)
        eng.partial_fit(X[start:start + 1_000])
        if any(r["event"] == "re-split" and r["node"] == eng.root_id_
               for r in eng.lineage_[before:]):
            rebuilt.append(sum(len(v.reservoir) for v in eng.nodes_.values() if v.is_leaf))
    return eng, rebuilt


def test_a_resplit_rebuilds_from_the_replaced_leaves_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Events sorted by cluster move the stream and re-split the root as clusters arrive.
    Rebuilt from the root's reservoir alone, the new tree's leaves held at most its 1,024
    rows; rebuilt from the rows of the leaves it replaces, they hold several reservoirs' worth
    and label better (0.85 × the oracle's ARI against 0.76 × with neither change; figures of
    the whole protocol in BENCHMARKS.md)."""
    X, y, oracle = _codes(seed=1)
    order = np.argsort(y, kind="stable")
    eng, rebuilt = _stream(X[order])
    assert rebuilt and max(rebuilt) > 2 * eng.reservoir_size, rebuilt
    got = adjusted_rand_score(y[order], eng.predict(X[order]))

    monkeypatch.setattr(RefitPass, "_subtree_rows", lambda self, v, roots: None)
    alone, rebuilt_alone = _stream(X[order])
    assert rebuilt_alone and max(rebuilt_alone) <= alone.reservoir_size, rebuilt_alone
    base = adjusted_rand_score(y[order], alone.predict(X[order]))
    assert got > base + 0.05, (got, base, oracle)


def test_a_rebuilt_leafs_mixed_sums_stay_out_of_the_refinement(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first half of the stream sorted by cluster, the rest in random order: the subtree
    a re-split rebuilt from sampled rows holds leaves whose sums mix clusters the refined fit
    has since told apart. Kept out of the sums' steps by their purity
    (:func:`streammom.stream_sums.sums_purity`), the stream labels near the oracle (0.988 ×);
    joining, they pull the fit back to the mixed leaves (0.914 ×). The moved test keeps one
    floor here (0.25, as when the check was built): with the lower floor after a settled refit
    (``stream_shift.SETTLED_SHIFT``) this stream takes other refits, and labels at 0.985 ×
    with the check and 0.975 × without."""
    import streammom.engine as engine_module
    import streammom.stream_sums as stream_sums
    from streammom.stream_shift import MOVED_SHIFT

    monkeypatch.setattr(engine_module, "SETTLED_SHIFT", MOVED_SHIFT)
    X, y, oracle = _codes(seed=1)
    half = y.size // 2
    order = np.concatenate([np.argsort(y[:half], kind="stable"), np.arange(half, y.size)])
    eng, _ = _stream(X[order])
    got = adjusted_rand_score(y[order], eng.predict(X[order]))
    assert got >= 0.95 * oracle, (got, oracle)

    monkeypatch.setattr(stream_sums, "sums_purity",
                        lambda fit, leaves, family: np.ones(len(leaves)))
    joined, _ = _stream(X[order])
    base = adjusted_rand_score(y[order], joined.predict(X[order]))
    assert got > base + 0.03, (got, base, oracle)
