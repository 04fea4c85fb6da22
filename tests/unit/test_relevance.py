"""Sievert–Shirley relevance and top features."""

from __future__ import annotations

import numpy as np
import pytest

from streammom.relevance import relevance, top_features


def test_relevance_formula_matches_definition() -> None:
    p = np.array([0.2, 0.05, 0.5])
    bg = np.array([0.1, 0.1, 0.5])
    lam = 0.7
    expected = lam * np.log(p) + (1 - lam) * np.log(p / bg)
    np.testing.assert_allclose(relevance(p, bg, lam), expected)


def test_lambda_one_ranks_by_probability_zero_by_lift() -> None:
    p = np.array([0.6, 0.1, 0.3])
    bg = np.array([0.6, 0.01, 0.3])
    assert [f.index for f in top_features(p, bg, n=3, lam=1.0)] == [0, 2, 1]
    assert top_features(p, bg, n=1, lam=0.0)[0].index == 1


def test_absent_features_never_returned_and_names_used() -> None:
    out = top_features(np.array([0.0, 0.3]), np.array([0.5, 0.3]), n=5, feature_names=["x", "y"])
    assert [f.name for f in out] == ["y"]
    assert out[0].lift == pytest.approx(1.0)


def test_multinomial_normalises() -> None:
    out = top_features(np.array([2.0, 2.0]), np.array([1.0, 3.0]), family="multinomial", n=2)
    assert out[0].probability == pytest.approx(0.5)
    assert out[0].index == 0  # same p, smaller background share → higher lift


def test_validation() -> None:
    with pytest.raises(ValueError, match="lam"):
        relevance(np.ones(2), np.ones(2), lam=1.5)
    with pytest.raises(ValueError, match="shape"):
        top_features(np.ones(2), np.ones(3))
    with pytest.raises(ValueError, match="names"):
        top_features(np.ones(2), np.ones(2), feature_names=["a"])
    with pytest.raises(ValueError, match="family"):
        top_features(np.ones(2), np.ones(2), family="gauss")  # type: ignore[arg-type]
