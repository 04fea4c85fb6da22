"""Spectral decompositions of moment matrices: whitening and the exact 2-way SIDIWO rotation.

Notation follows ``docs/design.md`` §4 and the thesis digest (Ruffini, *Learning Latent Variable
Models*, UPC 2018): M2 = M Ω Mᵀ, whitening E = U_k S_k^{1/2}, E† = S_k^{-1/2} U_kᵀ and whitened
third-order slices H_r = E† M3_r E†ᵀ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.sparse.linalg as spla

__all__ = [
    "NonPositiveEigenvalueError",
    "Rotation2",
    "Whitening",
    "sidiwo_objective",
    "sidiwo_rotation",
    "top_eigenpairs",
    "whiten",
]

_DENSE_EIGH_MAX_DIM = 400


class NonPositiveEigenvalueError(ValueError):
    """The k-th largest eigenvalue of M2 is not positive: k is too large for the data."""

    def __init__(self, k: int, eigenvalues: np.ndarray) -> None:
        self.k = k
        self.eigenvalues = np.asarray(eigenvalues)
        super().__init__(
            f"cannot whiten with k={k}: the top-{k} eigenvalues of M2 are "
            f"{np.array2string(self.eigenvalues, precision=4)}; the {k}-th is not positive, "
            f"so the data support fewer than {k} components"
        )


def _canonical_signs(vecs: np.ndarray) -> np.ndarray:
    """Flip each column so that its entry of largest magnitude is positive (deterministic)."""
    idx = np.argmax(np.abs(vecs), axis=0)
    signs = np.sign(vecs[idx, np.arange(vecs.shape[1])])
    signs[signs == 0] = 1.0
    return vecs * signs


def top_eigenpairs(
    M2: np.ndarray | spla.LinearOperator,
    k: int,
    *,
    random_state: int = 0,
    tol: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """The k largest *algebraic* eigenpairs of a symmetric matrix or linear operator.

    Returns ``(values, vectors)`` with values in decreasing order and eigenvector signs fixed
    (largest-magnitude entry positive). Small dense matrices use LAPACK ``eigh``; large ones and
    linear operators use Lanczos (ARPACK ``eigsh``, ``which='LA'``) from a seeded start vector,
    so results are deterministic. Algebraic, not absolute, eigenvalues: unbiased moment
    estimators are indefinite in finite samples (thesis digest §7, pitfall 2).

    >>> vals, vecs = top_eigenpairs(np.diag([3.0, -5.0, 1.0]), 2)
    >>> vals.tolist()
    [3.0, 1.0]
    """
    d = M2.shape[0]
    if not 1 <= k <= d:
        raise ValueError(f"k must be in [1, {d}], got {k}")
    if isinstance(M2, np.ndarray) and (d <= _DENSE_EIGH_MAX_DIM or k >= d - 1):
        vals, vecs = scipy.linalg.eigh(M2, subset_by_index=[d - k, d - 1])
    else:
        v0 = np.random.default_rng(random_state).uniform(0.5, 1.5, size=d)
        vals, vecs = spla.eigsh(M2, k=k, which="LA", v0=v0, tol=tol)
    order = np.argsort(vals)[::-1]
    return vals[order], _canonical_signs(vecs[:, order])


@dataclass(frozen=True)
class Whitening:
    """Rank-k whitening of M2: ``E = U S^{1/2}`` and ``E† = S^{-1/2} Uᵀ`` (thesis Alg. 1, 1–2)."""

    eigenvalues: np.ndarray  # (k,) decreasing, all > 0
    eigenvectors: np.ndarray  # U, (d, k)

    @property
    def pinv(self) -> np.ndarray:
        """E† = S^{-1/2} Uᵀ, shape (k, d)."""
        return self.eigenvectors.T / np.sqrt(self.eigenvalues)[:, None]

    @property
    def factor(self) -> np.ndarray:
        """E = U S^{1/2}, shape (d, k)."""
        return self.eigenvectors * np.sqrt(self.eigenvalues)[None, :]


def whiten(
    M2: np.ndarray | spla.LinearOperator,
    k: int,
    *,
    random_state: int = 0,
    rel_tol: float = 1e-12,
) -> Whitening:
    """Whiten with the k largest algebraic eigenpairs of M2 (``eigh``, never ``svd``).

    Raises :class:`NonPositiveEigenvalueError`, naming k, when the k-th eigenvalue is not
    positive (relative to the largest), instead of taking the square root of a negative number.
    """
    vals, vecs = top_eigenpairs(M2, k, random_state=random_state)
    scale = max(abs(float(vals[0])), np.finfo(float).tiny)
    if vals[-1] <= rel_tol * scale:
        raise NonPositiveEigenvalueError(k, vals)
    return Whitening(eigenvalues=vals, eigenvectors=vecs)


@dataclass(frozen=True)
class Rotation2:
    """The optimal 2×2 rotation of SIDIWO for l = 2 and its quality signals.

    ``matrix`` is O = [[cos θ, sin θ], [−sin θ, cos θ]] (the paper's O_a with a = sin θ);
    ``objective`` = min_θ Σ_r (Oᵀ H_r O)₁₂² = λ_min(G); ``gap`` = λ_max(G) − λ_min(G), the
    eigen-gap of G (≈ 0 means the slices prefer no rotation: no split signal).
    """

    theta: float
    matrix: np.ndarray
    objective: float
    gap: float
    scale: float  # trace(G) / 2: the objective of a random rotation, for a scale-free ratio

    @property
    def relative_gap(self) -> float:
        """gap / (λ_max + λ_min) ∈ [0, 1]; 1 means a perfectly diagonalising rotation exists."""
        return self.gap / (2.0 * self.scale) if self.scale > 0 else 0.0

    def swapped(self) -> Rotation2:
        """The other optimum θ + π/2: the same split with the two rows/children swapped."""
        theta = self.theta + np.pi / 2 if self.theta <= 0 else self.theta - np.pi / 2
        return Rotation2(theta, _rotation_matrix(theta), self.objective, self.gap, self.scale)


def _rotation_matrix(theta: float) -> np.ndarray:
    c, s = np.cos(theta), np.sin(theta)
    return np.array([[c, s], [-s, c]])


def sidiwo_objective(a: np.ndarray | float, h: np.ndarray, f: np.ndarray) -> np.ndarray:
    """The paper's F(a) = Σ_r (O_aᵀ H_r O_a)₁₂² as a quartic in a ∈ [−1, 1].

    F(a) = c1 a⁴ + c2 a³√(1−a²) + c3 a√(1−a²) + c4 a² + c5 with h_r = (H_r)₁₂,
    f_r = (H_r)₁₁ − (H_r)₂₂, c1 = Σ(4h² − f²), c2 = −4Σfh, c3 = 2Σfh, c4 = Σf² − 4Σh²,
    c5 = Σh² (Ruffini, Rabusseau & Balle, *Hierarchical Methods of Moments*, NeurIPS 2017,
    Thm 3.3 / appendix E; thesis Thm 5.3.3). The papers minimise it on a grid; see
    :func:`sidiwo_rotation` for the exact minimiser.
    """
    a = np.asarray(a, dtype=float)
    sh2, sf2, sfh = float(h @ h), float(f @ f), float(f @ h)
    c1, c2, c3, c4, c5 = 4 * sh2 - sf2, -4 * sfh, 2 * sfh, sf2 - 4 * sh2, sh2
    r = np.sqrt(np.clip(1.0 - a * a, 0.0, None))
    return c1 * a**4 + c2 * a**3 * r + c3 * a * r + c4 * a**2 + c5


def sidiwo_rotation(h: np.ndarray, f: np.ndarray) -> Rotation2:
    """Exact minimiser of the SIDIWO l = 2 objective (design §4; a Jacobi angle).

    With O = [[cos θ, sin θ], [−sin θ, cos θ]] the off-diagonal entry of the rotated slice is
    (Oᵀ H_r O)₁₂ = h_r cos 2θ + (f_r/2) sin 2θ, so Σ_r (·)² = uᵀ G u with u = (cos 2θ, sin 2θ)
    and G = Σ_r [h_r, f_r/2]ᵀ [h_r, f_r/2]. The minimum is λ_min(G), reached where u is the
    eigenvector of λ_min: 2θ = atan2(u₂, u₁). Of the two optima θ and θ ± π/2 (child order),
    the one in (−π/4, π/4] is returned; :meth:`Rotation2.swapped` gives the other.

    >>> rot = sidiwo_rotation(np.array([0.0, 1.0]), np.array([2.0, 0.0]))
    >>> round(rot.objective, 12) >= 0.0
    True
    """
    h = np.asarray(h, dtype=float).ravel()
    f = np.asarray(f, dtype=float).ravel()
    g11, g12, g22 = float(h @ h), float(h @ f) / 2.0, float(f @ f) / 4.0
    half_diff = (g11 - g22) / 2.0
    radius = float(np.hypot(half_diff, g12))
    mean = (g11 + g22) / 2.0
    lam_min = max(mean - radius, 0.0)
    # Eigenvector of λ_min of [[g11, g12], [g12, g22]] is at angle φ_max + π/2 where
    # φ_max = ½ atan2(2 g12, g11 − g22); u = (cos 2θ, sin 2θ) so θ = φ / 2.
    phi = 0.5 * np.arctan2(2.0 * g12, g11 - g22) + np.pi / 2.0
    theta = float(phi / 2.0)
    while theta > np.pi / 4:
        theta -= np.pi / 2
    while theta <= -np.pi / 4:
        theta += np.pi / 2
    return Rotation2(theta, _rotation_matrix(theta), lam_min, 2.0 * radius, mean)
