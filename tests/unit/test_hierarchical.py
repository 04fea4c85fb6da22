"""HierarchicalMoM: recovery of known hierarchies, determinism, stopping rules, validation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.metrics import adjusted_rand_score

from streammom import HierarchicalMoM
from streammom.datasets import make_block_topics, make_hierarchical_bernoulli
from streammom.model import HierarchyModel


@pytest.fixture(scope="module")
def bernoulli_tree() -> tuple[sp.csr_array, np.ndarray, np.ndarray]:
    X, y, levels = make_hierarchical_bernoulli(20_000, 500, 8, random_state=0)
    return X, y, levels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_the_eight_topic_hierarchy(seed: int) -> None:
    """Paper §4.1 / thesis Table 5.1: hierarchical SIDIWO at depth 3 (paper: ARI 0.98 ± 0.01)."""
    X, y = make_block_topics(random_state=seed)
    est = HierarchicalMoM(max_depth=3, method="sidiwo", family="multinomial").fit(X)
    assert est.n_leaves_ == 8
    assert adjusted_rand_score(y, est.labels_) >= 0.9
    # the first split is the designed one: topics {1–4} against {5–8}
    first = est.model_.route(X).paths[:, 1]
    assert adjusted_rand_score(y >= 4, first) >= 0.95
    # every internal node was a confident split
    for node in est.tree_:
        if node.children:
            assert node.quality["sidiwo_degenerate"] == 0.0


def test_dsidiwo_on_topics_is_also_good() -> None:
    X, y = make_block_topics(random_state=5)
    est = HierarchicalMoM(max_depth=3, method="dsidiwo", family="multinomial").fit(X)
    assert adjusted_rand_score(y, est.labels_) >= 0.9


@pytest.mark.parametrize("method", ["dsidiwo", "sidiwo"])
def test_recovers_a_hierarchical_bernoulli_tree(
    bernoulli_tree: tuple[sp.csr_array, np.ndarray, np.ndarray], method: str
) -> None:
    """Each level of the generator's tree is recovered (the Bayes classifier's leaf ARI ≈ 0.9)."""
    X, y, levels = bernoulli_tree
    est = HierarchicalMoM(max_depth=3, method=method).fit(X)
    paths = est.model_.route(X).paths
    assert est.n_leaves_ == 8
    assert adjusted_rand_score(levels[:, 0], paths[:, 1]) >= 0.9
    assert adjusted_rand_score(levels[:, 1], paths[:, 2]) >= 0.85
    assert adjusted_rand_score(y, est.labels_) >= 0.75
    # leaves are nested in the true tree: each estimated depth-1 node is mostly one true half
    for child in est.model_.root.children:
        rows = paths[:, 1] == child
        assert np.bincount(levels[rows, 0], minlength=2).max() / rows.sum() >= 0.95


def test_em_refinement_helps_on_biased_raw_moments(
    bernoulli_tree: tuple[sp.csr_array, np.ndarray, np.ndarray],
) -> None:
    X, y, _ = bernoulli_tree
    plain = HierarchicalMoM(max_depth=3).fit(X)
    refined = HierarchicalMoM(max_depth=3, em=True).fit(X)
    assert adjusted_rand_score(y, refined.labels_) >= 0.85
    assert adjusted_rand_score(y, refined.labels_) >= adjusted_rand_score(y, plain.labels_)
    internal = [n for n in refined.tree_ if n.children]
    assert all(n.quality["em_iterations"] >= 1 for n in internal)
    assert all(not n.router.absolute for n in internal)  # EM splits route by MAP
    np.testing.assert_array_equal(refined.predict(X), refined.labels_)


@pytest.mark.parametrize(("method", "family"), [("dsidiwo", "bernoulli"),
                                                ("sidiwo", "bernoulli"),
                                                ("sidiwo", "multinomial")])
def test_fits_are_byte_identical_and_canonical(method: str, family: str) -> None:
    if family == "bernoulli":
        X, _, _ = make_hierarchical_bernoulli(4_000, 300, 8, random_state=3)
    else:
        X, _ = make_block_topics(random_state=3)
    a = HierarchicalMoM(max_depth=3, method=method, family=family).fit(X)
    b = HierarchicalMoM(max_depth=3, method=method, family=family).fit(X.copy())
    assert a.model_.to_bytes() == b.model_.to_bytes()
    np.testing.assert_array_equal(a.labels_, b.labels_)
    # round trip through the snapshot format keeps routing
    again = HierarchyModel.from_bytes(a.model_.to_bytes())
    np.testing.assert_array_equal(again.predict(X), a.labels_)
    # BFS ids: parents before children, depth non-decreasing with id, heavier child first
    ids = [n.node_id for n in a.tree_]
    assert ids == list(range(len(ids)))
    depths = [n.depth for n in a.tree_]
    assert depths == sorted(depths)
    for node in a.tree_:
        assert all(c > node.node_id for c in node.children)
        if node.children:
            assert node.split is not None and node.discriminators.shape == (2, X.shape[1])
            assert node.router is a.model_.nodes[node.node_id].router
            left, right = (a.tree_[c] for c in node.children)
            assert left.weight >= right.weight
            assert left.weight + right.weight == pytest.approx(node.weight)
            assert left.n_samples + right.n_samples == node.n_samples


def test_sparse_and_dense_input_agree() -> None:
    X, _ = make_block_topics(random_state=4)
    sparse = HierarchicalMoM(max_depth=3, method="sidiwo", family="multinomial").fit(X)
    dense = HierarchicalMoM(max_depth=3, method="sidiwo", family="multinomial").fit(X.toarray())
    coo = HierarchicalMoM(max_depth=3, method="sidiwo", family="multinomial").fit(sp.coo_matrix(X))
    assert sparse.model_.to_bytes() == dense.model_.to_bytes() == coo.model_.to_bytes()
    np.testing.assert_array_equal(sparse.predict(X.toarray()), sparse.labels_)


@pytest.mark.parametrize(("method", "family"), [("dsidiwo", "bernoulli"),
                                                ("sidiwo", "bernoulli"),
                                                ("dsidiwo", "multinomial"),
                                                ("sidiwo", "multinomial")])
def test_predict_on_training_data_equals_labels(method: str, family: str) -> None:
    if family == "bernoulli":
        X, _, _ = make_hierarchical_bernoulli(3_000, 300, 8, random_state=6)
    else:
        X, _ = make_block_topics(random_state=6)
    est = HierarchicalMoM(max_depth=3, method=method, family=family)
    labels = est.fit_predict(X)
    np.testing.assert_array_equal(labels, est.labels_)
    np.testing.assert_array_equal(est.predict(X), est.labels_)
    assert set(np.unique(est.labels_)) <= set(est.leaf_ids_)
    # node weights and means are those of the rows routed through each node
    paths = est.model_.route(X).paths
    for node in est.tree_:
        rows = (paths == node.node_id).any(axis=1)
        assert node.n_samples == rows.sum()
        np.testing.assert_allclose(node.mean, np.asarray(X[rows].mean(axis=0)).ravel(),
                                   atol=1e-12)


def test_sample_weights_act_like_repeated_rows() -> None:
    X, _ = make_block_topics(n_docs=300, random_state=8)
    counts = np.random.default_rng(0).integers(1, 4, size=X.shape[0])
    repeated = sp.csr_array(X[np.repeat(np.arange(X.shape[0]), counts)])
    weighted = HierarchicalMoM(max_depth=2, method="sidiwo", family="multinomial").fit(
        X, sample_weight=counts)
    plain = HierarchicalMoM(max_depth=2, method="sidiwo", family="multinomial").fit(repeated)
    np.testing.assert_array_equal(np.repeat(weighted.labels_, counts), plain.labels_)
    for a, b in zip(weighted.tree_, plain.tree_, strict=True):
        assert a.weight == pytest.approx(b.weight)
        np.testing.assert_allclose(a.mean, b.mean, atol=1e-12)


def test_min_node_size_stops_small_nodes() -> None:
    X, _ = make_block_topics(random_state=0)
    est = HierarchicalMoM(max_depth=3, method="sidiwo", family="multinomial",
                          min_node_size=250).fit(X)
    assert est.tree_[0].children  # 400 rows ≥ 250
    for node in est.tree_[1:]:
        assert node.is_leaf and node.n_samples < 250
        assert node.stop_reason == "min_node_size"
    assert est.n_leaves_ == 2


def test_one_sided_split_is_refused() -> None:
    X, _, _ = make_hierarchical_bernoulli(4_000, 300, 2, leaf_weights=np.array([0.9, 0.1]),
                                          random_state=0)
    free = HierarchicalMoM(max_depth=1).fit(X)
    share = free.tree_[0].quality["child_share_min"]
    assert 0.0 < share < 0.3
    strict = HierarchicalMoM(max_depth=1, min_child_fraction=share + 0.05).fit(X)
    assert strict.n_leaves_ == 1 and strict.tree_[0].stop_reason == "one_sided"
    assert np.all(strict.labels_ == 0)


def test_rank_deficient_node_becomes_a_leaf() -> None:
    X = np.tile([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], (40, 1))
    est = HierarchicalMoM(max_depth=3).fit(X)
    assert est.n_leaves_ == 1 and est.tree_[0].stop_reason == "rank"
    short_docs = sp.csr_array(np.eye(6).repeat(5, axis=0) * 2)  # every document has 2 tokens
    with pytest.raises(ValueError, match="3 tokens"):  # as SpectralMixture (issue #15)
        HierarchicalMoM(max_depth=3, family="multinomial").fit(short_docs)


def test_rotation_gap_floor_stops_splitting() -> None:
    X, _ = make_block_topics(random_state=0)
    est = HierarchicalMoM(max_depth=3, method="sidiwo", family="multinomial",
                          min_rotation_gap=1.0).fit(X)
    root = est.tree_[0]
    assert est.n_leaves_ == 1 and root.stop_reason == "rotation_gap"
    assert 0.0 < root.quality["rotation_gap"] < 1.0


def test_max_leaves_expands_heaviest_first(
    bernoulli_tree: tuple[sp.csr_array, np.ndarray, np.ndarray],
) -> None:
    X, _, _ = bernoulli_tree
    est = HierarchicalMoM(max_depth=3, max_leaves=5).fit(X)
    assert est.n_leaves_ == 5
    split_weights = [n.weight for n in est.tree_ if n.children]
    budget_leaves = [n.weight for n in est.tree_ if n.stop_reason == "max_leaves"]
    assert budget_leaves and min(split_weights) >= max(budget_leaves)
    assert HierarchicalMoM(max_depth=3, max_leaves=1).fit(X).n_leaves_ == 1
    # a budget that does not bind leaves the intrinsic stop reasons alone
    full = HierarchicalMoM(max_depth=3, max_leaves=8).fit(X)
    assert full.n_leaves_ == 8
    assert {n.stop_reason for n in full.tree_ if n.is_leaf} == {"max_depth"}


def test_max_depth_zero_and_depth_limit() -> None:
    X, _ = make_block_topics(random_state=0)
    est = HierarchicalMoM(max_depth=0, family="multinomial").fit(X)
    assert est.n_leaves_ == 1 and np.all(est.labels_ == 0)
    assert est.tree_[0].stop_reason == "max_depth"
    deep = HierarchicalMoM(max_depth=2, family="multinomial").fit(X)
    assert max(n.depth for n in deep.tree_) == 2 and deep.n_leaves_ == 4


def test_sklearn_protocol() -> None:
    est = HierarchicalMoM(max_depth=2, method="sidiwo")
    assert est.get_params()["max_depth"] == 2
    twin = clone(est)
    assert twin.get_params() == est.get_params() and twin is not est
    est.set_params(max_depth=4)
    assert est.max_depth == 4
    with pytest.raises(ValueError):
        est.set_params(depth=3)
    assert "max_depth=4" in repr(est)


def test_validation_errors() -> None:
    X, _ = make_block_topics(n_docs=50, random_state=0)
    with pytest.raises(RuntimeError, match="not fitted"):
        HierarchicalMoM().predict(X)
    with pytest.raises(ValueError, match="method"):
        HierarchicalMoM(method="kmeans").fit(X)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="family"):
        HierarchicalMoM(family="gaussian").fit(X)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_depth"):
        HierarchicalMoM(max_depth=-1).fit(X)
    with pytest.raises(ValueError, match="max_leaves"):
        HierarchicalMoM(max_leaves=0).fit(X)
    with pytest.raises(ValueError, match="min_node_size"):
        HierarchicalMoM(min_node_size=1).fit(X)
    with pytest.raises(TypeError):
        HierarchicalMoM(random_state=0.5).fit(X)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        HierarchicalMoM().fit(-X.toarray())
    bad = X.toarray()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        HierarchicalMoM().fit(bad)
    with pytest.raises(ValueError, match="2-D"):
        HierarchicalMoM().fit(np.ones(5))
    with pytest.raises(ValueError, match="weights"):
        HierarchicalMoM().fit(X, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="binary"):
        HierarchicalMoM(method="sidiwo", family="bernoulli").fit(X)  # counts, not 0/1
    est = HierarchicalMoM(max_depth=1, family="multinomial").fit(X)
    with pytest.raises(ValueError, match="features"):
        est.predict(np.ones((2, 5)))


def test_labels_equal_predict_when_rows_tie(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #15: all-zero rows tie under a D-SIDIWO router (|0| = |0|) and go to child 0.
    When the split comes out with the heavier child second (forced here: the moment split is
    returned in the other child order), the estimator puts it first — and the fitted labels
    must still agree with predict for the tied rows."""
    import streammom.hierarchical as hierarchical

    real = hierarchical.compute_split
    monkeypatch.setattr(hierarchical, "compute_split",
                        lambda *args, **kw: real(*args, **kw).swapped())
    rng = np.random.default_rng(0)
    A = (rng.random((1000, 30)) < np.where(np.arange(30) < 15, 0.5, 0.03)).astype(float)
    B = (rng.random((500, 30)) < np.where(np.arange(30) < 15, 0.03, 0.5)).astype(float)
    X = sp.csr_array(np.vstack([A, B, np.zeros((200, 30))]))  # 200 rows tie everywhere
    est = HierarchicalMoM(max_depth=1, method="dsidiwo", random_state=0).fit(X)
    assert est.model_.n_leaves == 2
    np.testing.assert_array_equal(est.labels_, est.predict(X))
