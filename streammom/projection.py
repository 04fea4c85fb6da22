"""Projections of method-of-moments outputs onto their valid ranges.

Nothing in SVTD/SIDIWO forces 0 ≤ μ ≤ 1 or ω ≥ 0 (thesis digest §7, pitfall 7). The fix used
throughout streammom: clip Bernoulli centres into [ε, 1 − ε], project topics and mixing weights
onto the probability simplex (Euclidean projection, Duchi et al. 2008 — *not* abs or squaring),
and, where a log is taken afterwards, floor at ε with :func:`floor_simplex`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["clip_unit", "floor_simplex", "project_simplex"]


def project_simplex(v: np.ndarray, z: float = 1.0) -> np.ndarray:
    """Euclidean projection onto the simplex {w ≥ 0, Σ w = z}; rows of a 2-D array separately.

    Sort-and-threshold (Duchi, Shalev-Shwartz, Singer & Chandra, ICML 2008, Fig. 1; cited by
    *Hierarchical Methods of Moments* §3 for the pseudo-centres): sort u = v decreasingly,
    ρ = max{j : u_j − (Σ_{r≤j} u_r − z)/j > 0}, τ = (Σ_{r≤ρ} u_r − z)/ρ, w = max(v − τ, 0).
    Cost O(d log d) per row, vectorised over rows.

    >>> project_simplex(np.array([0.5, 0.5])).tolist()
    [0.5, 0.5]
    >>> project_simplex(np.array([2.0, 0.0, -1.0])).tolist()
    [1.0, 0.0, 0.0]
    >>> project_simplex(np.array([[0.0, 0.5], [1.0, 1.0]])).tolist()
    [[0.25, 0.75], [0.5, 0.5]]
    """
    if z <= 0:
        raise ValueError(f"z must be positive, got {z}")
    arr = np.asarray(v, dtype=float)
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ValueError(f"expected a non-empty 1-D or 2-D array, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("cannot project non-finite values onto the simplex")
    rows = np.atleast_2d(arr)
    u = -np.sort(-rows, axis=1)
    css = np.cumsum(u, axis=1) - z
    j = np.arange(1, rows.shape[1] + 1)
    cond = u - css / j > 0  # true on a prefix (Duchi et al. Lemma 2); u_1 − (u_1 − z) = z > 0
    rho = cond.sum(axis=1)  # ≥ 1
    tau = css[np.arange(rows.shape[0]), rho - 1] / rho
    out = np.maximum(rows - tau[:, None], 0.0)
    return out.reshape(arr.shape)


def clip_unit(v: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Clip into [ε, 1 − ε]: the valid range of Bernoulli means with finite log-likelihood.

    >>> clip_unit(np.array([-0.5, 0.3, 1.2]), 0.01).tolist()
    [0.01, 0.3, 0.99]
    """
    if not 0.0 <= eps < 0.5:
        raise ValueError(f"eps must be in [0, 0.5), got {eps}")
    return np.clip(np.asarray(v, dtype=float), eps, 1.0 - eps)


def floor_simplex(counts: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """argmax_μ Σ_h c_h log μ_h subject to μ_h ≥ ε, Σ μ = 1; rows of a 2-D array separately.

    With non-negative c this is "floor and renormalise" done exactly: by the KKT conditions
    μ_h = max(ε, c_h / λ) with λ such that F(λ) = Σ_h max(ε, c_h / λ) = 1 (water filling).
    It is the multinomial M-step under a floor, so EM with it still increases the
    likelihood monotonically; applied to a probability vector p it keeps p wherever p ≥ ε·(a
    constant close to 1). Rows with Σ c = 0 become uniform.

    λ by the active-set iteration λ_{t+1} = Σ_{h∈S_t} c_h / (1 − ε (d − |S_t|)) with
    S_t = {h : c_h > ε λ_t}, from λ_0 = Σ c: with S frozen the sum is a lower bound of F that
    touches it at λ_t, so λ_t ≤ λ_{t+1} ≤ λ* (F decreases) and S shrinks until it stops
    changing, at λ* exactly. O(d) a round, a few rounds on mixture counts (the zeros are
    floored from the first); rows still moving after :data:`_FLOOR_ROUNDS` rounds are solved
    by sorting, O(d log d).

    >>> floor_simplex(np.array([3.0, 1.0, 0.0]), 0.1).round(6).tolist()
    [0.675, 0.225, 0.1]
    """
    arr = np.asarray(counts, dtype=float)
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ValueError(f"expected a non-empty 1-D or 2-D array, got shape {arr.shape}")
    rows = np.maximum(np.atleast_2d(arr), 0.0)
    d = rows.shape[1]
    if not 0.0 <= eps * d < 1.0:
        raise ValueError(f"eps={eps} is too large for {d} categories")
    lam = rows.sum(axis=1)
    active = rows > eps * lam[:, None]
    moving = np.ones(rows.shape[0], dtype=bool)
    for _ in range(_FLOOR_ROUNDS):
        idx = np.flatnonzero(moving)
        if idx.size == 0:
            break
        act = active[idx]
        lam[idx] = ((rows[idx] * act).sum(axis=1)
                    / (1.0 - (d - act.sum(axis=1)) * eps))
        new = rows[idx] > eps * lam[idx, None]
        moving[idx] = (new != act).any(axis=1)
        active[idx] = new
    if moving.any():
        lam[moving] = _floor_lambda_sorted(rows[moving], eps)
    out = rows / np.where(lam > 0, lam, np.inf)[:, None]  # all-zero rows: 0, then uniform
    np.maximum(out, eps, out=out)
    out /= out.sum(axis=1, keepdims=True)  # exact up to rounding
    return out.reshape(arr.shape)


#: Rounds of :func:`floor_simplex`'s active-set iteration before a row is solved by sorting.
_FLOOR_ROUNDS = 32


def _floor_lambda_sorted(rows: np.ndarray, eps: float) -> np.ndarray:
    """λ of :func:`floor_simplex` by sorting: the largest m whose top-m active set is
    consistent (u_m ≥ ε λ_m with λ_m = Σ_{r≤m} u_r / (1 − (d − m) ε), u sorted down)."""
    d = rows.shape[1]
    u = -np.sort(-rows, axis=1)
    css = np.cumsum(u, axis=1)
    m = np.arange(1, d + 1)
    lam = css / (1.0 - (d - m) * eps)  # λ if exactly the top m entries are above the floor
    ok = u >= eps * lam
    ok[:, 0] = True
    m_star = d - np.argmax(ok[:, ::-1], axis=1)
    return lam[np.arange(rows.shape[0]), m_star - 1]
