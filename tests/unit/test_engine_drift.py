"""Decay, drift recovery, re-split and prune of the streaming engine (design §3, §5)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

from streammom import MomentAccumulator, StreamingHierarchy
from streammom import engine as engine_module
from streammom import moments as moments_module
from streammom.datasets import make_hierarchical_bernoulli
from streammom.packed import dense
from streammom.rowgram import RowGram


def _two_regimes(d: int, n1: int, n2: int) -> tuple[sp.csr_array, sp.csr_array, np.ndarray]:
    """Regime 1, then a different 4-leaf mixture (other seed, features permuted)."""
    kw = {"codes_per_event": 16.0, "signal": 0.9}
    X1, _, _ = make_hierarchical_bernoulli(n1, d, 4, random_state=1, **kw)
    X2, y2, _ = make_hierarchical_bernoulli(n2, d, 4, random_state=2, **kw)
    perm = np.random.default_rng(5).permutation(d)
    return X1, sp.csr_array(X2[:, perm]), y2


def test_abrupt_drift_is_recovered_within_five_half_lives() -> None:
    d, H, batch = 200, 2000, 500
    X1, X2, y2 = _two_regimes(d, 30_000, 5 * H + 5000)
    X_new, y_new = X2[5 * H :], y2[5 * H :]  # held-out events of the new mixture
    eng = StreamingHierarchy(d, max_depth=2, half_life=H, refit_every=batch,
                             min_split_weight=300.0, random_state=0)
    for s in range(0, X1.shape[0], batch):
        eng.learn(X1[s : s + batch])
    assert eng.model_.n_leaves == 4
    n_before = eng.n_events_seen_
    assert adjusted_rand_score(y_new, eng.predict(X_new)) < 0.5  # the old tree is wrong now
    for s in range(0, 5 * H, batch):
        eng.learn(X2[s : s + batch])
    assert adjusted_rand_score(y_new, eng.predict(X_new)) >= 0.9
    events = [r["event"] for r in eng.lineage_ if r["n_events"] > n_before]
    assert "re-split" in events
    resplits = [r for r in eng.lineage_ if r["event"] == "re-split" and r["n_events"] > n_before]
    assert all(r["removed"] and r["rerouted"] > eng.resplit_threshold for r in resplits)
    assert set(eng.model_.leaf_ids).isdisjoint(range(7))  # the old leaves are gone


@pytest.mark.parametrize("unit", ["events", "seconds"])
def test_lazy_decay_is_exact(unit: str) -> None:
    """Decayed sums equal the sums with explicit weights 2^(−age/H), across renormalisations."""
    d, H, n = 40, 50.0, 6000  # 120 half-lives: the lazy scale is renormalised on the way
    X, _, _ = make_hierarchical_bernoulli(n, d, 2, codes_per_event=6, random_state=7)
    w = np.random.default_rng(8).uniform(0.5, 2.0, size=n)
    ts = np.cumsum(np.random.default_rng(9).uniform(0.0, 2.0, size=n)) if unit == "seconds" \
        else None
    eng = StreamingHierarchy(d, max_depth=0, half_life=H, half_life_unit=unit,  # type: ignore[arg-type]
                             refit_every=None, random_state=0)
    for s in range(0, n, 700):
        eng.learn(X[s : s + 700], weights=w[s : s + 700],
                  timestamps=None if ts is None else ts[s : s + 700])
    age = (n - 1 - np.arange(n)) if ts is None else (ts[-1] - ts)
    ref = MomentAccumulator(d)
    ref.update(X, w * 2.0 ** (-age / H))
    got = eng.node_accumulator(0)
    assert got.weight == pytest.approx(ref.weight, rel=1e-9)
    np.testing.assert_allclose(got.s, ref.s, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.C, ref.C, rtol=1e-9, atol=1e-12)
    eng.refit()  # the published model's node weights are refreshed at refits
    assert eng.model_.root.weight == pytest.approx(ref.weight, rel=1e-9)


def test_vanished_cluster_is_pruned() -> None:
    """A child that stops receiving events decays below prune_fraction and is merged back.

    ``refit_min_new_fraction=1`` freezes the root router after its first split (under decay
    the weight received since a refit never reaches the node's whole weight), so the side
    that stops receiving events decays geometrically until it is pruned.
    """
    d, H = 100, 500
    X, y, _ = make_hierarchical_bernoulli(12_000, d, 2, codes_per_event=12, signal=0.9,
                                          random_state=3)
    eng = StreamingHierarchy(d, max_depth=1, half_life=H, refit_every=500,
                             min_split_weight=200.0, refit_min_new_fraction=1.0,
                             prune_fraction=0.05, random_state=0)
    for s in range(0, 6000, 500):
        eng.learn(X[s : s + 500])
    assert eng.model_.n_leaves == 2
    only = X[6000:][y[6000:] == 0]
    n_before = eng.n_events_seen_
    for s in range(0, only.shape[0], 250):
        eng.learn(only[s : s + 250])
    pruned = [r for r in eng.lineage_ if r["event"] == "prune" and r["n_events"] > n_before]
    assert pruned and pruned[0]["node"] == 0 and len(pruned[0]["removed"]) == 2
    assert min(pruned[0]["child_weights"]) < 0.05 * pruned[0]["weight"] + 1e-9
    # After the prune the root C again holds everything (offset + children were folded in).
    root = eng.nodes_[0]
    assert root.acc.C is not None
    eng.refit()
    assert eng.node_accumulator(0).weight == pytest.approx(eng.model_.root.weight, rel=1e-12)
    assert eng.model_.n_leaves == 1


def test_no_version_churn_without_new_data() -> None:
    X, _, _ = make_hierarchical_bernoulli(8000, 60, 2, codes_per_event=8, random_state=4)
    eng = StreamingHierarchy(60, max_depth=1, half_life=1000, refit_every=None,
                             min_split_weight=100.0)
    eng.learn(X)
    eng.refit()
    v = eng.model_version_
    assert eng.refit() == [] and eng.model_version_ == v


def _drift_resplits() -> tuple[int, list[int]]:
    """Two 10,000-event regimes (batches of 500, a refit each, half-life 1,000): the re-splits
    the drift makes, and the leaves left by each refit that made one."""
    d, batch = 200, 500
    X1, X2, _ = _two_regimes(d, 10_000, 10_000)
    eng = StreamingHierarchy(d, max_depth=2, half_life=1_000, refit_every=batch,
                             min_split_weight=100.0, random_state=0)
    leaves_after_resplit = []
    for X in (X1, X2):
        for s in range(0, X.shape[0], batch):
            seen = len(eng.lineage_)
            eng.learn(X[s : s + batch])
            if any(r["event"] == "re-split" for r in eng.lineage_[seen:]):
                leaves_after_resplit.append(eng.model_.n_leaves)
    return sum(r["event"] == "re-split" for r in eng.lineage_), leaves_after_resplit


@pytest.fixture(scope="module")
def drift_resplits() -> tuple[int, list[int]]:
    """:func:`_drift_resplits` at the shipped settings, run once for the tests that read it."""
    return _drift_resplits()


def test_a_re_split_grows_its_subtree_again_in_the_same_refit(
        drift_resplits: tuple[int, list[int]]) -> None:
    """A re-split discards the node's subtree; the refit that makes it gives the leaf budget the
    other leaves leave to the new children, grown from their reservoirs: after an abrupt drift
    re-splits the root (no other leaf left), the refit leaves the full tree, not two leaves."""
    _, leaves_after_resplit = drift_resplits
    assert leaves_after_resplit, "the drift made no re-split"
    assert min(leaves_after_resplit) == 4


def test_a_recomputed_split_no_better_than_the_routing_is_not_a_re_split() -> None:
    """The re-split test compares likelihoods, not only routes: the node's current routing
    against the recomputed split, each by its classification log-likelihood gain on the node's
    reservoir. A split that sends the rows differently but explains them worse is declined."""
    from streammom.model import Router
    from streammom.refit import RefitPass

    X, _, _ = make_hierarchical_bernoulli(2_000, 60, 2, codes_per_event=8.0, random_state=3)
    eng = StreamingHierarchy(60, max_depth=1, refit_every=None, random_state=0)
    eng.learn(X)
    eng.refit()
    root = eng.nodes_[eng.root_id_]
    assert root.router is not None
    rows = root.reservoir.to_csr()
    good = root.router
    rng = np.random.default_rng(0)
    noise = Router(rng.standard_normal((2, 60)), np.zeros(2), absolute=False)
    refit = RefitPass(eng, eigen=None)  # type: ignore[arg-type]
    assert not refit._resplit_gains(root, noise, rows)  # routes otherwise, and worse
    root.router = noise
    assert refit._resplit_gains(root, good, rows)  # the other way round: better


def test_a_re_split_must_gain_significantly_not_only_on_average(
        drift_resplits: tuple[int, list[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-split test is a paired z-test over the node's reservoir rows (design §5): the
    drift's re-splits of the test above clear it at the shipped ``RESPLIT_Z``; a bar no gain
    clears refuses every one of them, and the subtree then stays as it was."""
    import streammom.refit as refit_module
    from streammom.refine import gains_significantly

    assert drift_resplits[0] > 0
    monkeypatch.setattr(refit_module, "RESPLIT_Z", 1e9)
    assert _drift_resplits() == (0, [])
    rng = np.random.default_rng(0)
    old = rng.normal(size=500)
    assert gains_significantly(old + 0.2, old, 2.0)  # every row gains: significant
    noise = rng.normal(size=500)
    noisy = old + 0.02 + (noise - noise.mean())  # higher on average, within the noise
    assert noisy.mean() > old.mean() and not gains_significantly(noisy, old, 2.0)


@pytest.mark.parametrize("held", ["rows", "packed"])
def test_a_prune_keeps_the_heavy_childs_subtree_and_the_exact_sums(
        held: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prune whose heavy child is internal promotes that child's subtree (design §5
    "prune"): its nodes keep their sums and routers one level up, the light child goes, and
    the node's full C is unchanged (its offset absorbs the removed nodes' C), whether the
    offset is kept as rows (every C held as rows: no limit) or summed packed (limit 0)."""
    limit = 10**12 if held == "rows" else 0
    for module in (engine_module, moments_module):
        monkeypatch.setattr(module, "rows_limit", lambda d: limit)
    X, _, _ = make_hierarchical_bernoulli(6_000, 200, 4, codes_per_event=10, signal=0.9,
                                          leaf_weights=np.array([0.1, 0.1, 0.4, 0.4]),
                                          random_state=5)
    eng = StreamingHierarchy(200, max_leaves=3, refit_every=None, random_state=0)
    eng.partial_fit(X)
    eng.refit()
    root = eng.nodes_[eng.root_id_]
    weights = [eng.nodes_[c].acc.weight for c in root.children]
    light, heavy = (root.children[i] for i in np.argsort(weights))
    assert eng.nodes_[light].is_leaf and not eng.nodes_[heavy].is_leaf
    grand = list(eng.nodes_[heavy].children)
    sums = {g: (eng.nodes_[g].acc.s.copy(), eng.nodes_[g].acc.weight) for g in grand}
    router = eng.nodes_[heavy].router
    full_before = dense(eng.node_accumulator(eng.root_id_).C).copy()

    eng.prune_fraction = 0.3  # the root's light child (19 %) is now below it, no other
    eng.refit()
    assert isinstance(eng.nodes_[eng.root_id_].acc.C, RowGram) == (held == "rows")
    pruned = [r for r in eng.lineage_ if r["event"] == "prune"]
    assert pruned and pruned[-1]["promoted"] == heavy
    assert sorted(pruned[-1]["removed"]) == sorted([light, heavy])
    root = eng.nodes_[eng.root_id_]
    assert root.children == grand and light not in eng.nodes_ and heavy not in eng.nodes_
    assert router is not None and root.router is not None
    for g in grand:
        v = eng.nodes_[g]
        assert v.parent == eng.root_id_ and v.depth == 1 and v.is_leaf
        np.testing.assert_array_equal(v.acc.s, sums[g][0])
        assert v.acc.weight == sums[g][1]
    np.testing.assert_allclose(dense(eng.node_accumulator(eng.root_id_).C), full_before,
                               rtol=1e-12, atol=1e-9)
    assert eng.model_.n_leaves == 2
    assert eng.predict(X).shape == (X.shape[0],)
