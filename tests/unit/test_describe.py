"""What the library prints (issue #17, item 10): a text tree, a notebook HTML view, readable
feature scores, and River-style one-event learning."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streammom import StreamingHierarchy, Vocabulary, top_features
from streammom.datasets import make_hierarchical_bernoulli
from streammom.model import HierarchyModel, Router, TreeNode


@pytest.fixture(scope="module")
def engine() -> StreamingHierarchy:
    X, _, _ = make_hierarchical_bernoulli(6_000, 60, 4, codes_per_event=8.0, random_state=1)
    eng = StreamingHierarchy(max_depth=2, refit_every=2_000)
    for start in range(0, 6_000, 1_000):
        eng.learn(X[start:start + 1_000])
    eng.refit()  # the model and the sums describe the same moment
    return eng


def test_text_tree_has_one_line_per_node_and_marks_leaves(engine: StreamingHierarchy) -> None:
    model = engine.model_
    assert model is not None
    text = str(model)
    lines = text.splitlines()
    assert lines[0].startswith(f"HierarchyModel v{model.version}:")
    assert len(lines) == 1 + len(model.nodes)
    shown = [int(line.lstrip("│├└─ ").split()[0].rstrip("*")) for line in lines[1:]]
    assert sorted(shown) == sorted(model.nodes)
    leaves = {int(line.lstrip("│├└─ ").split()[0][:-1]) for line in lines[1:]
              if line.lstrip("│├└─ ").split()[0].endswith("*")}
    assert leaves == set(model.leaf_ids)
    assert engine.describe(n_top=0) == model.describe(n_top=0)
    bare = model.describe(n_top=0).splitlines()[1:]
    assert all(line.count("(") == 1 for line in bare)  # only "(share%)": no features asked
    assert all(line.count("(") == 6 for line in lines[2:])  # share + 5 features per non-root


def test_html_view_escapes_feature_names() -> None:
    router = Router(np.eye(2), np.zeros(2), absolute=True)
    model = HierarchyModel([TreeNode(0, -1, 0, 2.0, np.array([0.5, 0.5]), (1, 2), router),
                            TreeNode(1, 0, 1, 1.0, np.array([1.0, 0.0])),
                            TreeNode(2, 0, 1, 1.0, np.array([0.0, 1.0]))],
                           n_features=2, feature_names=["<script>x</script>", "a&b"])
    page = model._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page and "a&amp;b" in page
    assert page.count("<li") == 3 and page.count("<details") == 1


def test_feature_scores_print_as_names_and_numbers() -> None:
    scores = top_features(np.array([0.9, 0.1]), np.array([0.3, 0.3]), n=1,
                          feature_names=["E11.9", "I10"])
    r = 0.7 * np.log(0.9) + 0.3 * np.log(0.9 / 0.3)  # relevance, λ = 0.7
    assert repr(scores) == f"[FeatureScore('E11.9', relevance={r:.3g}, p=0.9, background=0.3)]"


def test_learn_one_is_learn_on_a_batch_of_one() -> None:
    events = [["E11.9", "I10"], ["I10"], ["Z99.89", "E11.9"], []]
    one = StreamingHierarchy(vocabulary=Vocabulary(capacity=8))
    batch = StreamingHierarchy(vocabulary=Vocabulary(capacity=8))
    leaves = [one.learn_one(e, timestamp=1.7e9 + i) for i, e in enumerate(events)]
    for i, e in enumerate(events):
        batch.learn([e], timestamps=[1.7e9 + i])
    assert one.snapshot() == batch.snapshot()
    assert leaves == [0, 0, 0, 0]
    assert one.predict_one(["I10"]) == int(one.predict([["I10"]])[0])
    vec = StreamingHierarchy(3)
    assert vec.learn_one([1.0, 0.0, 1.0]) == 0 and vec.n_events_seen_ == 1
    assert vec.predict_one(np.array([0.0, 1.0, 0.0])) == 0


def test_one_event_errors_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="vocabulary"):
        StreamingHierarchy(4).learn_one(["E11.9"])
    with pytest.raises(ValueError, match=r"a vector of length d \(or one row\)"):
        StreamingHierarchy(4).predict_one(sp.csr_array(np.ones((2, 4))).toarray())
    with pytest.raises(ValueError, match=r"got shape \(2, 4\)"):
        StreamingHierarchy(4).learn_one(sp.csr_array(np.ones((2, 4))))


def test_one_event_may_be_a_sparse_row_or_a_batch_of_one_row() -> None:
    """A row cut from a sparse batch (1-D, or 1 × d) or a 1 × d dense row is one event: the
    same state as the dense vector."""
    X = sp.csr_array(np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]]))
    ways = [lambda i: X[[i]], lambda i: X[i], lambda i: X[[i]].toarray(),
            lambda i: X[[i]].toarray().ravel()]
    engines = [StreamingHierarchy(4) for _ in ways]
    for eng, way in zip(engines, ways, strict=True):
        assert [eng.learn_one(way(i)) for i in (0, 1, 0)] == [0, 0, 0]
        assert eng.predict_one(way(1)) == 0
    assert len({eng.snapshot() for eng in engines}) == 1 and engines[0].n_events_seen_ == 3
