"""Vocabulary: fixed / growing / capacity / OOV / transforms / archive / validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streammom.serialization import SnapshotFormatError
from streammom.vocab import Vocabulary


def test_fixed_vocabulary_counts_oov() -> None:
    v = Vocabulary(["a", "b", "c"])
    assert not v.growing and v.n_features == 3 and len(v) == 3
    X = v.transform([["a", "z"], ["c", "c", "b"], []])
    assert X.shape == (3, 3)
    assert X.toarray().tolist() == [[1, 0, 0], [0, 1, 1], [0, 0, 0]]
    assert v.oov_count == 1
    assert v.feature_names == ("a", "b", "c")
    assert "z" not in v and v.index("c") == 2


def test_growing_vocabulary_fills_up_to_capacity() -> None:
    v = Vocabulary(capacity=3)
    assert v.growing and v.n_features == 3 and len(v) == 0
    X = v.transform([["x", "y"], ["y", "w", "q"]])
    assert X.shape == (2, 3)
    assert v.tokens == ("x", "y", "w")
    assert v.oov_count == 1  # "q" found the vocabulary full
    assert X.toarray().tolist() == [[1, 1, 0], [0, 1, 1]]
    assert Vocabulary(capacity=4).feature_names == ("", "", "", "")


def test_growing_from_initial_tokens() -> None:
    v = Vocabulary(["a"], capacity=3, growing=True)
    v.transform([["b", "a"]])
    assert v.feature_names == ("a", "b", "")


def test_counts_and_binary_modes() -> None:
    v = Vocabulary(["w1", "w2", "w3"])
    docs = [{"w1": 3, "w3": 1}, ["w2", "w2", "w1"], {"w2": 0}]
    counts = v.transform(docs, binary=False).toarray()
    assert counts.tolist() == [[3, 0, 1], [1, 2, 0], [0, 0, 0]]
    binary = v.transform(docs, binary=True).toarray()
    assert binary.tolist() == [[1, 0, 1], [1, 1, 0], [0, 0, 0]]
    v.transform([{"nope": 4}])
    assert v.oov_count == 4
    assert v.transform([]).shape == (0, 3)


def test_zero_counts_do_not_grow_the_vocabulary() -> None:
    v = Vocabulary(capacity=5)
    v.transform([{"a": 0, "b": 2}])
    assert v.tokens == ("b",)


def test_from_file(tmp_path: Path) -> None:
    path = tmp_path / "codes.txt"
    path.write_text("I10\n  E11  \n\nJ45\n", encoding="utf-8")
    v = Vocabulary.from_file(path)
    assert v.tokens == ("I10", "E11", "J45") and not v.growing
    g = Vocabulary.from_file(path, capacity=10, growing=True)
    assert g.n_features == 10 and g.growing


def test_archive_roundtrip() -> None:
    v = Vocabulary(capacity=5)
    v.transform([["a", "b"], ["c", "d", "e", "f"]])
    manifest, arrays = v.to_archive()
    back = Vocabulary.from_archive(manifest, arrays)
    assert back.tokens == v.tokens and back.capacity == 5 and back.oov_count == 1
    assert back.growing
    fixed = Vocabulary(["x"])
    assert Vocabulary.from_archive(fixed.to_archive()[0]).tokens == ("x",)
    with pytest.raises(SnapshotFormatError):
        Vocabulary.from_archive({"kind": "other"})
    with pytest.raises(SnapshotFormatError):
        Vocabulary.from_archive({**manifest, "schema_version": 99})


def test_deterministic_index_order() -> None:
    events = [["c", "a"], ["b", "a", "d"]]
    a, b = Vocabulary(capacity=10), Vocabulary(capacity=10)
    np.testing.assert_array_equal(a.transform(events).toarray(), b.transform(events).toarray())
    assert a.tokens == ("c", "a", "b", "d")  # order of first appearance


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"tokens": ["a", "a"]}, ValueError),
        ({"tokens": ["a", ""]}, ValueError),
        ({"tokens": ["a", 3]}, TypeError),
        ({"tokens": "abc"}, TypeError),
        ({"tokens": []}, ValueError),
        ({"capacity": 0}, ValueError),
        ({"capacity": 2.5}, TypeError),
        ({"tokens": ["a", "b", "c"], "capacity": 2, "growing": True}, ValueError),
    ],
)
def test_constructor_validation(kwargs: dict, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        Vocabulary(**kwargs)


@pytest.mark.parametrize(
    ("events", "exc"),
    [
        ("abc", TypeError),
        ([["a", 1]], TypeError),
        (["abc"], TypeError),
        ([{"a": -1}], ValueError),
        ([{"a": 1.5}], TypeError),
        ([{"a": True}], TypeError),
        ([3], TypeError),
        ([[""]], ValueError),
    ],
)
def test_transform_validation(events: object, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        Vocabulary(capacity=4).transform(events)  # type: ignore[arg-type]


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("capacity, growing", [(4096, True), (7, True), (None, False)])
def test_list_fast_path_equals_the_general_path(binary: bool, capacity: int | None,
                                                growing: bool) -> None:
    """Token lists take the vectorised path; it numbers, counts, drops and reports exactly as
    the one-token-at-a-time path (repeats, unseen tokens, a full or fixed vocabulary)."""
    rng = np.random.default_rng(5)
    pool = [f"t{i}" for i in range(40)]
    events = [[pool[j] for j in rng.integers(0, 40, size=rng.integers(0, 9))]
              for _ in range(300)]
    seed_tokens = pool[:5] if not growing else None

    def make() -> Vocabulary:
        if growing:
            return Vocabulary(capacity=capacity)
        return Vocabulary(seed_tokens)

    fast, general = make(), make()
    a = fast.transform(events[:150], binary=binary)
    b = general._transform_general(events[:150], binary=binary)
    a2 = fast.transform(events[150:], binary=binary)
    b2 = general._transform_general(events[150:], binary=binary)
    for x, y in ((a, b), (a2, b2)):
        assert x.shape == y.shape
        assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)
        assert np.array_equal(x.data, y.data)
        assert x.indices.dtype == y.indices.dtype and x.indptr.dtype == y.indptr.dtype
    assert fast.feature_names == general.feature_names
    assert fast.oov_count == general.oov_count
    if capacity == 7 or not growing:
        assert fast.oov_count > 0  # the drop path was exercised


def test_list_fast_path_refuses_bad_tokens_like_the_general_path() -> None:
    for bad, error in (([["a", 3]], TypeError), ([["a", ""]], ValueError),
                       ([["a", ["nested"]]], TypeError)):
        with pytest.raises(error):
            Vocabulary(capacity=8).transform(bad)
