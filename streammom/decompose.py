"""Spectral decompositions of moment matrices: whitening and the exact 2-way SIDIWO rotation.

Notation follows ``docs/design.md`` §4 and the thesis digest (Ruffini, *Learning Latent Variable
Models*, UPC 2018): M2 = M Ω Mᵀ, whitening E = U_k S_k^{1/2}, E† = S_k^{-1/2} U_kᵀ and whitened
third-order slices H_r = E† M3_r E†ᵀ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import scipy.linalg
import scipy.sparse.linalg as spla

from streammom.estimators import DENSE_EIGH_MAX_DIM, Family, implicit_moments
from streammom.projection import project_simplex

__all__ = [
    "KnownSpectrumOperator",
    "NonPositiveEigenvalueError",
    "Rotation2",
    "SpectralDecomposition",
    "Whitening",
    "asvtd",
    "jacobi_joint_diagonalize",
    "sidiwo_objective",
    "sidiwo_rotation",
    "svtd",
    "top_eigenpairs",
    "whiten",
]


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


class KnownSpectrumOperator(spla.LinearOperator):
    """V diag(θ) Vᵀ + σ (I − V Vᵀ), σ below every θ: a d×d operator whose top eigenpairs are
    exactly (θ, V) (V orthonormal, θ decreasing), applied in O(d·p).

    The streaming engine solves for the top eigenpairs of a node's M2 itself (warm-started, from
    the packed sums) and hands this operator to :func:`~streammom.split.compute_split`, whose
    :func:`top_eigenpairs` then reads the pairs off instead of running Lanczos again.

    >>> op = KnownSpectrumOperator(np.array([3.0, 1.0]), np.eye(4)[:, :2])
    >>> top_eigenpairs(op, 2)[0].tolist(), (op @ np.ones(4)).tolist()
    ([3.0, 1.0], [3.0, 1.0, -2.0, -2.0])
    """

    def __init__(self, eigenvalues: np.ndarray, eigenvectors: np.ndarray) -> None:
        vals = np.asarray(eigenvalues, dtype=np.float64)
        vecs = np.asarray(eigenvectors, dtype=np.float64)
        if vecs.ndim != 2 or vals.shape != (vecs.shape[1],) or not vals.size:
            raise ValueError("need p eigenvalues and a (d, p) matrix of eigenvectors")
        if np.any(np.diff(vals) > 0):
            raise ValueError("eigenvalues must be in decreasing order")
        self.eigenvalues = vals
        self.eigenvectors = vecs
        self._sigma = float(vals[-1]) - max(abs(float(vals[0])), 1e-300)
        self._shift = vals - self._sigma
        super().__init__(dtype=np.dtype(np.float64), shape=(vecs.shape[0], vecs.shape[0]))

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        V = self.eigenvectors
        return V @ (self._shift[:, None] * (V.T @ X)) + self._sigma * X

    def _adjoint(self) -> KnownSpectrumOperator:
        return self


def top_eigenpairs(
    M2: np.ndarray | spla.LinearOperator,
    k: int,
    *,
    random_state: int = 0,
    tol: float = 0.0,
    v0: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The k largest *algebraic* eigenpairs of a symmetric matrix or linear operator.

    Returns ``(values, vectors)`` with values in decreasing order and eigenvector signs fixed
    (largest-magnitude entry positive). A :class:`KnownSpectrumOperator` gives its own pairs.
    Small dense matrices use LAPACK ``eigh``; large ones and linear operators use Lanczos
    (ARPACK ``eigsh``, ``which='LA'``) from a start vector — ``v0`` if given, else one seeded by
    ``random_state`` — so results are deterministic; ``tol`` is ARPACK's relative accuracy (0:
    machine precision). Raises ``ArpackNoConvergence``, its converged pairs attached.
    Algebraic, not absolute, eigenvalues: unbiased moment estimators are indefinite in finite
    samples (thesis digest §7, pitfall 2).

    >>> vals, vecs = top_eigenpairs(np.diag([3.0, -5.0, 1.0]), 2)
    >>> vals.tolist()
    [3.0, 1.0]
    """
    d = M2.shape[0]
    if not 1 <= k <= d:
        raise ValueError(f"k must be in [1, {d}], got {k}")
    if isinstance(M2, KnownSpectrumOperator) and k <= M2.eigenvalues.size:
        vals, vecs = M2.eigenvalues[:k].copy(), M2.eigenvectors[:, :k].copy()
    elif isinstance(M2, np.ndarray) and (d <= DENSE_EIGH_MAX_DIM or k >= d - 1):
        vals, vecs = scipy.linalg.eigh(M2, subset_by_index=[d - k, d - 1])
    else:
        if v0 is None:
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


# ---------------------------------------------------------------------------------------------
# SVTD / ASVTD (thesis Ch. 2 Alg. 1, Ch. 4 Alg. 2) and Jacobi joint diagonalisation (k > 2)
# ---------------------------------------------------------------------------------------------

RotationMethod = Literal["slice", "jacobi"]
SliceCriterion = Literal["relative", "absolute"]


@dataclass(frozen=True)
class SpectralDecomposition:
    """Output of SVTD/ASVTD: centres M (thesis notation, d × k), weights ω and diagnostics.

    ``centers`` are the raw diagonals diag(Oᵀ H_i O) (not clipped: raw Bernoulli moments are
    biased, thesis §4.3, and finite-sample noise can leave [0, 1]); ``weights`` is the
    least-squares solution of M ω = M1 projected onto the simplex (thesis digest §7 pitfall 7).
    """

    centers: np.ndarray  # M, (d, k): column j is μ_j
    weights: np.ndarray  # ω ∈ simplex, (k,)
    weights_lstsq: np.ndarray  # argmin ‖M ω − M1‖ before the projection
    rotation: np.ndarray  # O, (k, k) orthogonal
    whitening: Whitening
    slice_index: int  # the feature r whose slice gave O (the initial O for Jacobi)
    slice_gap: float  # min_{a≠b} |λ_a(H_r) − λ_b(H_r)|
    slices: np.ndarray  # whitened slices H_i = E† M3_i E†ᵀ, (d, k, k)

    @property
    def means(self) -> np.ndarray:
        """Centres as rows, (k, d) — the layout of the mixture and model code."""
        return self.centers.T


def jacobi_joint_diagonalize(
    H: np.ndarray,
    tol: float = 1e-12,
    max_sweeps: int = 100,
    *,
    init: np.ndarray | None = None,
) -> np.ndarray:
    """Orthogonal O minimising Σ_i Σ_{a≠b} (Oᵀ H_i O)_ab² over symmetric slices H (m, k, k).

    Cardoso & Souloumiac (SIAM J. Matrix Anal. Appl. 17, 1996) Jacobi sweeps; for l > 2 the
    thesis points to this (Ch. 5; digest part 2 §1.4). Each Givens update of the pair (p, q) is
    the exact 2-way SIDIWO rotation (:func:`sidiwo_rotation`) of the 2×2 sub-problem with
    h_i = (H_i)_pq and f_i = (H_i)_pp − (H_i)_qq: it minimises Σ_i (H_i)_pq² after the update,
    so the criterion never increases. A sweep visits all pairs; iteration stops after a sweep
    in which no rotation has |sin θ| > ``tol`` (or after ``max_sweeps``). ``init`` (orthogonal)
    is the starting O; the identity by default. Deterministic.
    """
    A = np.array(H, dtype=float)
    if A.ndim != 3 or A.shape[1] != A.shape[2]:
        raise ValueError(f"expected slices of shape (m, k, k), got {A.shape}")
    k = A.shape[1]
    A = (A + A.transpose(0, 2, 1)) / 2.0
    V = np.eye(k) if init is None else np.array(init, dtype=float)
    if V.shape != (k, k):
        raise ValueError(f"init must have shape {(k, k)}, got {V.shape}")
    if init is not None:
        A = V.T @ A @ V
    for _ in range(max_sweeps):
        rotated = False
        for p in range(k - 1):
            for q in range(p + 1, k):
                h = A[:, p, q]
                f = A[:, p, p] - A[:, q, q]
                g11, g12, g22 = float(h @ h), float(h @ f) / 2.0, float(f @ f) / 4.0
                # decrease of the criterion, in a cancellation-free form (0 = nothing to gain)
                half_diff = (g11 - g22) / 2.0
                radius = float(np.hypot(half_diff, g12))
                gain = g12 * g12 / (radius - half_diff) if g12 != 0.0 else max(g11 - g22, 0.0)
                if gain <= 0.0:
                    continue
                theta = sidiwo_rotation(h, f).theta
                c, s = np.cos(theta), np.sin(theta)
                if abs(s) <= tol:
                    continue
                rotated = True
                # A ← Gᵀ A G and V ← V G, G = I except G[[p, q]][:, [p, q]] = [[c, s], [−s, c]]
                Ap, Aq = A[:, p, :].copy(), A[:, q, :].copy()
                A[:, p, :], A[:, q, :] = c * Ap - s * Aq, s * Ap + c * Aq
                Ap, Aq = A[:, :, p].copy(), A[:, :, q].copy()
                A[:, :, p], A[:, :, q] = c * Ap - s * Aq, s * Ap + c * Aq
                Vp, Vq = V[:, p].copy(), V[:, q].copy()
                V[:, p], V[:, q] = c * Vp - s * Vq, s * Vp + c * Vq
        if not rotated:
            break
    return V


def _best_slice(H: np.ndarray, criterion: SliceCriterion) -> tuple[int, float, np.ndarray]:
    """The slice whose eigenvalues are best separated, and its eigenvectors (thesis Rem. 2.1.2).

    ``criterion="absolute"`` is the thesis rule: maximise α_r = min_{a≠b} |λ_a(H_r) − λ_b(H_r)|.
    ``criterion="relative"`` maximises α_r / max_a |λ_a(H_r)|, the scale-free form: the
    condition (2.6) of Thm 2.2.1 compares α_r with ‖H_r‖, and the sampling noise of a raw-
    moment slice grows with its magnitude (≈ the feature's prevalence), so the absolute rule
    favours frequent features whose slices are large but not better separated. On the §4.5
    Bernoulli benchmark (d=99, k=12, n=10⁴, 10 seeds) it lifts ASVTD's ARI from 0.62 to 0.79
    before EM and from 0.91 to 0.93 after (``bench/quality_bernoulli.py``). Both rules are
    exact on population moments.

    Uses ``eigh`` of the symmetric H_r and gaps of its *signed* eigenvalues, not singular values:
    noise can make eigenvalues negative and |·| would create false ties (digest §7, pitfall 3).
    Ties go to the lowest feature index. Returns (r, α_r, eigenvectors of H_r).
    """
    if criterion not in ("absolute", "relative"):
        raise ValueError(f"slice criterion must be 'absolute' or 'relative', got {criterion!r}")
    k = H.shape[1]
    eig = np.linalg.eigvalsh(H)  # (d, k) ascending
    gaps = np.diff(eig, axis=1).min(axis=1) if k > 1 else np.abs(eig[:, 0])
    score = gaps
    if criterion == "relative":
        size = np.abs(eig).max(axis=1)
        score = np.divide(gaps, size, out=np.zeros_like(gaps), where=size > 0)
    r = int(np.argmax(score))
    _, vecs = np.linalg.eigh(H[r])
    return r, float(gaps[r]), _canonical_signs(vecs)


def _decomposition(
    H: np.ndarray,
    M1: np.ndarray,
    wh: Whitening,
    rows: Callable[[np.ndarray], np.ndarray],
    rotation: RotationMethod,
    criterion: SliceCriterion,
) -> SpectralDecomposition:
    if rotation not in ("slice", "jacobi"):
        raise ValueError(f"rotation must be 'slice' or 'jacobi', got {rotation!r}")
    r, gap, rot = _best_slice(H, criterion)
    if rotation == "jacobi":
        rot = jacobi_joint_diagonalize(H, init=rot)
    centers = rows(rot)
    # thesis Alg. 1 step 6: ω solves M ω = M1 (least squares), then onto the simplex
    w_ls = scipy.linalg.lstsq(centers, M1, lapack_driver="gelsd")[0]
    return SpectralDecomposition(
        centers=centers,
        weights=project_simplex(w_ls),
        weights_lstsq=w_ls,
        rotation=rot,
        whitening=wh,
        slice_index=r,
        slice_gap=gap,
        slices=H,
    )


def svtd(
    M1: np.ndarray,
    M2: np.ndarray,
    M3: np.ndarray | Callable[[int], np.ndarray],
    k: int,
    *,
    rotation: RotationMethod = "slice",
    slice_criterion: SliceCriterion = "relative",
    random_state: int = 0,
) -> SpectralDecomposition:
    """SVTD (thesis Ch. 2, Alg. 1) from explicit moments: exact on population moments (Thm 2.1.1).

    1–2. Whiten M2 (top-k algebraic eigenpairs): E = U S^{1/2}, E† = S^{-1/2} Uᵀ.
    3–4. H_i = E† M3_i E†ᵀ for every feature i; pick r with the largest minimum eigen-gap of H_r
         (relative to its largest |eigenvalue| by default, or absolute as in the thesis: see
         ``slice_criterion`` in :func:`_best_slice`) and let O be its eigenvectors
         (H_r = O diag(m_r) Oᵀ on exact moments).
         ``rotation="jacobi"``: O jointly diagonalises all slices instead (Jacobi sweeps
         started from that eigenbasis).
    5.   Row i of M = diag(Oᵀ H_i O).
    6.   ω = argmin ‖M ω − M1‖ projected onto the simplex.

    ``M3`` is a dense (d, d, d) tensor or a function r ↦ M3_r (d, d) (memory O(d²); the
    explicit path costs O(d³ k) either way).
    """
    M1 = np.asarray(M1, dtype=float).ravel()
    M2 = np.asarray(M2, dtype=float)
    d = M1.shape[0]
    if M2.shape != (d, d):
        raise ValueError(f"M2 must have shape {(d, d)}, got {M2.shape}")
    wh = whiten(M2, k, random_state=random_state)
    Wp = wh.pinv
    if callable(M3):
        H = np.stack([Wp @ np.asarray(M3(r), dtype=float) @ Wp.T for r in range(d)])
    else:
        T = np.asarray(M3, dtype=float)
        if T.shape != (d, d, d):
            raise ValueError(f"M3 must have shape {(d, d, d)}, got {T.shape}")
        H = Wp @ (T @ Wp.T)  # (d, k, k): H_r = E† M3_r E†ᵀ
    H = (H + H.transpose(0, 2, 1)) / 2.0

    def rows(rot: np.ndarray) -> np.ndarray:
        return np.einsum("aj,rab,bj->rj", rot, H, rot)

    return _decomposition(H, M1, wh, rows, rotation, slice_criterion)


def asvtd(
    X: Any,
    k: int,
    family: Family = "bernoulli",
    sample_weight: Any = None,
    *,
    rotation: RotationMethod = "slice",
    slice_criterion: SliceCriterion = "relative",
    random_state: int = 0,
) -> SpectralDecomposition:
    """ASVTD (thesis Ch. 4, Alg. 2): SVTD straight from the data, never forming M3.

    Z = X E†ᵀ; all whitened slices H_i at once (O(nnz · k²),
    :meth:`~streammom.estimators.ImplicitMoments.whitened_slices`); r by the largest minimum
    eigen-gap (``slice_criterion``, see :func:`_best_slice`); rows of M by the vectorised extraction
    (O(nnz · k)); ω by least squares projected onto the simplex. ``family="bernoulli"`` uses
    the raw moments (biased on the diagonals by design, thesis Thm 4.3.1 — refine with EM);
    ``family="multinomial"`` the unbiased single-topic estimators (thesis Thm 3.2.1, digest
    §4.5). M2 is dense for d ≤ 400 and a matrix-free operator (Lanczos) above.
    Raises :class:`NonPositiveEigenvalueError` when k exceeds the rank the data support.
    """
    mom = implicit_moments(X, family, sample_weight)
    wh = whiten(mom.m2(), k, random_state=random_state)
    Wp = wh.pinv
    H = mom.whitened_slices(Wp)
    return _decomposition(
        H, mom.m1, wh, lambda rot: mom.rows(Wp, rot), rotation, slice_criterion
    )
