"""Reservoir: bounded weighted sample of a node's events (design §5 "reservoir")."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from streammom.reservoir import Reservoir


def _rows(n: int, d: int, seed: int) -> sp.csr_array:
    """n distinct rows: row i has a 1 in column i mod d plus a few random codes, value i+1
    in the first stored slot so rows can be told apart."""
    rng = np.random.default_rng(seed)
    X = (rng.random((n, d)) < 0.2).astype(float)
    X[np.arange(n), np.arange(n) % d] = np.arange(n) + 1.0
    return sp.csr_array(X)


def _ids(res: Reservoir) -> np.ndarray:
    """The event ids (values of the marker column) of the stored rows, in slot order."""
    return res.to_csr().toarray().max(axis=1).astype(int) - 1


def test_keeps_every_event_until_full() -> None:
    X = _rows(30, 12, 0)
    res = Reservoir(50, 12)
    rng = np.random.default_rng(1)
    res.offer(X, np.ones(10), 0.0, rng)
    res.offer(X, np.ones(20), 10.0, rng, start=10)
    assert len(res) == 30
    np.testing.assert_array_equal(res.to_csr().toarray(), X.toarray())


def test_offer_with_start_equals_offering_the_slice() -> None:
    """The engine offers a node's slice of a sorted batch by its start row: the same as offering
    the sub-matrix itself (same draws, same slots)."""
    X = _rows(400, 20, 2)
    w = np.random.default_rng(3).uniform(0.5, 2.0, 400)
    a, b = 150, 330
    by_start, by_slice = Reservoir(32, 20), Reservoir(32, 20)
    by_start.offer(X, w[a:b], 7.0, np.random.default_rng(4), start=a)
    by_slice.offer(X[a:b], w[a:b], 7.0, np.random.default_rng(4))
    np.testing.assert_array_equal(by_start.to_csr().toarray(), by_slice.to_csr().toarray())
    with pytest.raises(ValueError, match="outside"):
        by_start.offer(X, w[:100], 0.0, np.random.default_rng(0), start=350)


def test_equal_weights_give_a_uniform_sample() -> None:
    """With equal weights every event ends in the reservoir with probability K/N (Chao 1982):
    over many seeds the inclusion counts of the first and second half of the stream agree,
    and the sample size is K."""
    n, d, k = 2_000, 8, 50
    X = _rows(n, d, 5)
    first_half = 0
    runs = 200
    for seed in range(runs):
        res = Reservoir(k, d)
        rng = np.random.default_rng(seed)
        for s in range(0, n, 250):
            res.offer(X, np.ones(250), float(s), rng, start=s)
        assert len(res) == k
        first_half += int((_ids(res) < n // 2).sum())
    share = first_half / (runs * k)
    # Binomial(10,000, 0.5): sd 0.005; 0.03 is six sd.
    assert abs(share - 0.5) < 0.03


def test_recent_events_win_under_growing_weights() -> None:
    """Lazily decayed weights grow as 2^(t/H): the sample follows the decayed distribution, so
    the last half-life's events dominate it."""
    n, d, k, H = 4_000, 8, 64, 500.0
    X = _rows(n, d, 6)
    w = np.exp2(np.arange(n) / H)
    res = Reservoir(k, d)
    res.offer(X, w, 0.0, np.random.default_rng(0))
    recent = float((_ids(res) >= n - H).mean())
    assert recent > 0.35  # the last H events hold half of the decayed weight
    assert float((_ids(res) < n // 2).mean()) < 0.15


def test_from_rows_keeps_rows_that_fit_and_draws_heavy_rows_first() -> None:
    """A subtree a re-split rebuilds starts its reservoirs from the replaced subtree's rows:
    rows that fit are all kept, in order, entries intact; past the capacity the draw is
    without replacement and proportional to the weight a row stands for (rows of weight 9
    against rows of weight 1, equally many: 90 % of a large sample), the same draw for the
    same generator, and rows of weight 0 never."""
    X = _rows(300, 16, 7)
    small = Reservoir.from_rows(X[:40], np.ones(40), 64, np.random.default_rng(0))
    assert len(small) == 40
    np.testing.assert_array_equal(small.to_csr().toarray(), X[:40].toarray())

    w = np.where(np.arange(300) < 150, 9.0, 1.0)
    draws = [Reservoir.from_rows(X, w, 50, np.random.default_rng(s)) for s in range(40)]
    assert all(len(r) == 50 and np.unique(_ids(r)).size == 50 for r in draws)
    heavy = np.mean([(_ids(r) < 150).mean() for r in draws])
    assert 0.85 < heavy < 0.95, heavy  # 0.9 in expectation (less: without replacement)
    again = Reservoir.from_rows(X, w, 50, np.random.default_rng(3))
    np.testing.assert_array_equal(again.to_csr().toarray(), draws[3].to_csr().toarray())

    zero = np.where(np.arange(300) % 2 == 0, 1.0, 0.0)
    kept = _ids(Reservoir.from_rows(X, zero, 100, np.random.default_rng(1)))
    assert kept.size == 100 and (kept % 2 == 0).all()
