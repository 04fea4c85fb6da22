"""Simplex projection, unit clipping and the floored multinomial M-step."""

from __future__ import annotations

import numpy as np
import pytest

from streammom.projection import clip_unit, floor_simplex, project_simplex


def _random_simplex_points(rng: np.random.Generator, m: int, d: int) -> np.ndarray:
    pts = rng.dirichlet(np.full(d, 0.5), size=m)
    corners = np.eye(d)
    return np.vstack([pts, corners])


@pytest.mark.parametrize("d", [1, 2, 5, 17])
def test_project_simplex_is_the_euclidean_projection(d: int) -> None:
    # w is the projection of v onto the closed convex simplex iff w is feasible and
    # (v − w)·(u − w) ≤ 0 for every feasible u (variational inequality).
    rng = np.random.default_rng(d)
    for _ in range(50):
        v = rng.normal(scale=2.0, size=d)
        w = project_simplex(v)
        assert w.min() >= 0.0
        assert w.sum() == pytest.approx(1.0, abs=1e-12)
        u = _random_simplex_points(rng, 200, d)
        assert ((u - w) @ (v - w)).max() <= 1e-12


def test_project_simplex_rows_match_one_by_one_and_keep_simplex_points() -> None:
    rng = np.random.default_rng(0)
    V = rng.normal(size=(30, 7))
    W = project_simplex(V)
    assert W.shape == V.shape
    for v, w in zip(V, W, strict=True):
        np.testing.assert_array_equal(project_simplex(v), w)
    P = rng.dirichlet(np.ones(7), size=10)
    np.testing.assert_allclose(project_simplex(P), P, atol=1e-15)


def test_project_simplex_radius_and_errors() -> None:
    w = project_simplex(np.array([3.0, 1.0, 0.0]), z=2.0)
    np.testing.assert_allclose(w, [2.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        project_simplex(np.array([np.nan, 1.0]))
    with pytest.raises(ValueError):
        project_simplex(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError):
        project_simplex(np.array([1.0]), z=0.0)


def test_clip_unit() -> None:
    np.testing.assert_array_equal(clip_unit(np.array([-1.0, 0.5, 2.0]), 0.1), [0.1, 0.5, 0.9])
    with pytest.raises(ValueError):
        clip_unit(np.array([0.5]), 0.5)


def _floor_by_active_set(c: np.ndarray, eps: float) -> np.ndarray:
    """Reference: grow the floored set until every free entry is above the floor."""
    floored = np.zeros(c.shape, dtype=bool)
    while True:
        free_mass = 1.0 - eps * floored.sum()
        total = c[~floored].sum()
        mu = np.where(floored, eps, c * free_mass / total)
        newly = (~floored) & (mu < eps)
        if not newly.any():
            return mu
        floored |= newly


def test_floor_simplex_is_the_floored_maximiser() -> None:
    rng = np.random.default_rng(3)
    for _ in range(100):
        d = int(rng.integers(2, 12))
        c = rng.exponential(size=d) * (rng.random(d) < 0.6)
        if c.sum() == 0:
            c[0] = 1.0
        eps = float(rng.uniform(0.0, 0.9 / d))
        mu = floor_simplex(c, eps)
        np.testing.assert_allclose(mu, _floor_by_active_set(c, eps), rtol=1e-12, atol=1e-15)
        assert mu.min() >= eps * (1 - 1e-12)
        assert mu.sum() == pytest.approx(1.0, abs=1e-12)
        # no feasible perturbation improves Σ c log μ
        obj = c @ np.log(mu)
        for _ in range(20):
            delta = rng.normal(size=d) * 1e-3
            delta -= delta.mean()
            cand = mu + delta
            if cand.min() >= eps:
                assert c @ np.log(cand) <= obj + 1e-12


def test_floor_simplex_rows_and_zero_rows() -> None:
    C = np.array([[0.0, 0.0, 0.0], [5.0, 5.0, 0.0]])
    mu = floor_simplex(C, 0.01)
    np.testing.assert_allclose(mu[0], [1 / 3] * 3)
    np.testing.assert_allclose(mu[1], [0.495, 0.495, 0.01])
    with pytest.raises(ValueError):
        floor_simplex(np.ones(4), 0.3)


@pytest.mark.parametrize("rounds", [0, 1, 32])
def test_floor_simplex_active_set_iteration_and_its_sorting_fallback_agree(
        rounds: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide rows of mixture counts (many zeros, a tail of small counts near the floor): the
    active-set rounds, a fallback to sorting for the rows still moving (0 or 1 round), and
    the reference all give the same floored maximiser."""
    import streammom.projection as projection

    rng = np.random.default_rng(rounds)
    C = rng.gamma(0.2, 1.0, size=(6, 400)) * (rng.random((6, 400)) < 0.3)
    C[0] = 0.0
    eps = 0.9 / 400
    monkeypatch.setattr(projection, "_FLOOR_ROUNDS", rounds)
    mu = projection.floor_simplex(C, eps)
    for row, c in zip(mu, C, strict=True):
        if c.sum() == 0:
            np.testing.assert_allclose(row, 1 / 400)
        else:
            np.testing.assert_allclose(row, _floor_by_active_set(c, eps), rtol=1e-12,
                                       atol=1e-15)
