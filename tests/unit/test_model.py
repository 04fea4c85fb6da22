"""The immutable hierarchy model: routing rules, margins, validation, serialisation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sample_models import small_tree

from streammom.model import HierarchyModel, Router, TreeNode, map_router
from streammom.serialization import SnapshotFormatError


def test_routing_follows_each_router_rule() -> None:
    model = small_tree()
    X = np.array([[1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 1, 1]], dtype=float)
    routing = model.route(X)
    assert routing.leaf_ids.tolist() == [1, 3, 4, 3]  # last row: tie at node 2 goes to child 0
    assert routing.paths[:, 0].tolist() == [0, 0, 0, 0]
    assert routing.paths[0].tolist() == [0, 1, -1]
    assert np.isnan(routing.margins[0, 1])
    # D-SIDIWO margin = ||<d0,x>| − |<d1,x>||; MAP margin = log-posterior ratio.
    assert routing.margins[0, 0] == pytest.approx(2.0)
    expected_map = np.log(0.9 / 0.1) * 2  # x2 contributes log μ/(1−μ) difference twice
    assert routing.margins[1, 1] == pytest.approx(expected_map)
    assert routing.model_version == 3


def test_absolute_router_uses_magnitude() -> None:
    d = 2
    root = TreeNode(0, -1, 0, 2.0, np.full(d, 0.5), (1, 2),
                    Router(np.array([[-3.0, 0.0], [0.0, 1.0]]), np.zeros(2), absolute=True))
    leaves = [TreeNode(i, 0, 1, 1.0, np.full(d, 0.5)) for i in (1, 2)]
    model = HierarchyModel([root, *leaves], n_features=d)
    assert model.predict(np.array([[1.0, 1.0]])).tolist() == [1]


def _random_tree(d: int, depth: int, seed: int) -> HierarchyModel:
    """A binary tree of uneven depth (≤ depth) with random linear routers, |s| and plain."""
    rng = np.random.default_rng(seed)
    nodes, next_id, frontier = [], 1, [(0, -1, 0)]
    while frontier:
        nid, parent, level = frontier.pop()
        if level == depth or (level > 0 and nid % 3 == 0):
            nodes.append(TreeNode(nid, parent, level, 1.0, np.full(d, 0.5)))
            continue
        kids = (next_id, next_id + 1)
        next_id += 2
        router = Router(rng.normal(size=(2, d)), rng.normal(size=2), absolute=bool(nid % 2))
        nodes.append(TreeNode(nid, parent, level, 1.0, np.full(d, 0.5), kids, router))
        frontier += [(k, nid, level + 1) for k in kids]
    return HierarchyModel(nodes, n_features=d)


def _reference_route(model: HierarchyModel, X: np.ndarray) -> tuple[list[list[int]], list]:
    """Plain per-row walk: s = W x + b (|s| if absolute), child 1 iff s₁ > s₀."""
    paths, margins = [], []
    for x in X:
        node, path, margin = model.root_id, [model.root_id], []
        while model.nodes[node].children:
            r = model.nodes[node].router
            s = r.weights @ x + r.bias
            s = np.abs(s) if r.absolute else s
            node = model.nodes[node].children[int(s[1] > s[0])]
            path.append(node)
            margin.append(abs(s[1] - s[0]))
        paths.append(path)
        margins.append(margin)
    return paths, margins


def test_compiled_routing_matches_a_plain_walk() -> None:
    """The compiled walk (only the routers on each row's path are scored) gives the leaves,
    paths and margins of a direct evaluation, for dense, CSR int32 and CSR int64 input."""
    d = 30
    model = _random_tree(d, depth=4, seed=2)
    assert len({n.depth for n in model.nodes.values() if n.is_leaf}) > 1  # uneven paths
    rng = np.random.default_rng(1)
    X = (rng.random((500, d)) < 0.2) * rng.integers(1, 4, size=(500, d)).astype(float)
    X[3] = 0.0  # an empty row follows the biases
    paths, margins = _reference_route(model, X)
    Xs = sp.csr_array(X)
    X64 = sp.csr_array((Xs.data, Xs.indices.astype(np.int64), Xs.indptr.astype(np.int64)),
                       shape=Xs.shape)
    for batch in (X, Xs, X64):
        routing = model.route(batch)
        for i in range(X.shape[0]):
            depth = len(paths[i])
            assert routing.paths[i, :depth].tolist() == paths[i]
            assert (routing.paths[i, depth:] == -1).all()
            assert routing.leaf_ids[i] == paths[i][-1]
            np.testing.assert_allclose(routing.margins[i, : depth - 1], margins[i], rtol=1e-12,
                                       atol=1e-12)
            assert np.isnan(routing.margins[i, depth - 1 :]).all()
    assert len(set(routing.leaf_ids.tolist())) > 4  # the random routers use the whole tree


def _walk_with_router_side(model: HierarchyModel, X: sp.csr_array) -> np.ndarray:
    """Leaf of every row by the library's one Python routing rule, level by level."""
    leaf = np.full(X.shape[0], model.root_id, dtype=np.int64)
    frontier = [(model.root_id, np.arange(X.shape[0]))]
    while frontier:
        nid, rows = frontier.pop()
        node = model.nodes[nid]
        leaf[rows] = nid
        if node.children and rows.size:
            side = node.router.side(X[rows])
            frontier += [(node.children[c], rows[side == c]) for c in (0, 1)]
    return leaf


@pytest.mark.parametrize("absolute", [False, True])
def test_compiled_walk_equals_router_side_including_ties(absolute: bool) -> None:
    """Small-integer routers on small-integer rows score exactly, so many rows tie (s₀ = s₁,
    or |s₀| = |s₁|): the compiled walk and Router.side must send every row, ties included,
    to the same leaf (ties go to child 0)."""
    d = 6
    rng = np.random.default_rng(7)
    nodes, frontier, next_id = [], [(0, -1, 0)], 1
    while frontier:
        nid, parent, level = frontier.pop()
        if level == 3:
            nodes.append(TreeNode(nid, parent, level, 1.0, np.full(d, 0.5)))
            continue
        kids = (next_id, next_id + 1)
        next_id += 2
        w = rng.integers(-2, 3, size=(2, d)).astype(float)
        w[1, : d // 2] = -w[0, : d // 2] if absolute else w[0, : d // 2]  # equal or opposite
        router = Router(w, rng.integers(-1, 2, size=2).astype(float), absolute=absolute)
        nodes.append(TreeNode(nid, parent, level, 1.0, np.full(d, 0.5), kids, router))
        frontier += [(k, nid, level + 1) for k in kids]
    model = HierarchyModel(nodes, n_features=d)
    X = sp.csr_array(rng.integers(0, 2, size=(2000, d)).astype(float))
    ties = 0
    for node in model.nodes.values():
        if node.router is not None:
            s = np.asarray(X @ node.router.weights.T) + node.router.bias
            s = np.abs(s) if absolute else s
            ties += int(np.count_nonzero(s[:, 0] == s[:, 1]))
    assert ties > 100  # the case under test really occurs
    np.testing.assert_array_equal(model.route(X).leaf_ids, _walk_with_router_side(model, X))


def test_records_are_plain_json_types() -> None:
    rec = small_tree().route(np.array([[0.0, 0, 1, 0]])).records()[0]
    assert rec == {"leaf_id": 3, "path": [0, 2, 3], "margins": rec["margins"], "model_version": 3}
    assert len(rec["margins"]) == 2 and all(isinstance(m, float) for m in rec["margins"])


def test_round_trip_is_byte_identical_and_float32_is_close() -> None:
    model = small_tree()
    raw = model.to_bytes()
    again = HierarchyModel.from_bytes(raw)
    assert again.to_bytes() == raw
    X = np.eye(4)
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
    compact = HierarchyModel.from_bytes(model.to_bytes(dtype=np.float32))
    np.testing.assert_array_equal(compact.predict(X), model.predict(X))
    assert len(model.to_bytes(dtype=np.float32)) <= len(raw)


def test_top_features_ranks_by_relevance_against_root() -> None:
    top = small_tree().top_features(3, n=1)
    assert [f.name for f in top] == ["c"]


def test_path_and_leaves() -> None:
    model = small_tree()
    assert model.leaf_ids == (1, 3, 4)
    assert model.path_to(4) == [0, 2, 4]
    assert model.max_depth == 2


@pytest.mark.parametrize(
    "bad",
    [
        lambda n: [n[0], n[1]],  # child 2 missing
        lambda n: [n[1], n[2]],  # no root
        lambda n: [n[0], n[1], n[2], TreeNode(9, -1, 0, 1.0, np.zeros(4))],  # two roots
    ],
)
def test_invalid_trees_are_rejected(bad) -> None:
    base = small_tree()
    nodes = [base.nodes[0], base.nodes[1], TreeNode(2, 0, 1, 1.0, np.zeros(4))]
    with pytest.raises(ValueError):
        HierarchyModel(bad(nodes), n_features=4)


def test_input_validation() -> None:
    model = small_tree()
    with pytest.raises(ValueError, match="features"):
        model.predict(np.ones((2, 3)))
    with pytest.raises(ValueError, match="negative"):
        model.predict(-np.ones((1, 4)))
    with pytest.raises(ValueError, match="NaN"):
        model.predict(np.full((1, 4), np.nan))


def test_from_archive_rejects_other_kinds_and_versions() -> None:
    manifest, arrays = small_tree().to_archive()
    with pytest.raises(SnapshotFormatError, match="not a hierarchy model"):
        HierarchyModel.from_archive({**manifest, "kind": "other"}, arrays)
    with pytest.raises(SnapshotFormatError, match="schema version"):
        HierarchyModel.from_archive({**manifest, "schema_version": 99}, arrays)
    with pytest.raises(SnapshotFormatError, match="malformed"):
        HierarchyModel.from_archive(manifest, {"means": arrays["means"]})


def test_map_router_floors_probabilities() -> None:
    router = map_router(np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1.0, 0.0]), "bernoulli")
    assert np.isfinite(router.weights).all() and np.isfinite(router.bias).all()
    topic = map_router(np.array([[0.0, 1.0], [0.5, 0.5]]), np.array([0.5, 0.5]), "multinomial")
    np.testing.assert_allclose(np.exp(topic.weights).sum(axis=1), 1.0)
