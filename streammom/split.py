"""The 2-way split of one node: D-SIDIWO and SIDIWO from (implicit) moments.

Used by the batch :class:`~streammom.HierarchicalMoM` (moments computed from the node's rows)
and by the streaming engine (moments from running sums in a tracked basis). Formulas:

* Whitening with the top-2 eigenpairs of M2: E† = S^{-1/2} Uᵀ (design §3–4).
* Whitened third-order slices, packed per feature r as [H_r[0,0], H_r[0,1], H_r[1,1]]:

  - raw moments (binary data; D-SIDIWO, ASVTD — thesis ch. 4 §4.3, ch. 6):
    H_r = (1/W) Σ_i w_i x_ir z_i z_iᵀ with z_i = E† x_i;
  - single-topic unbiased estimator (count data; thesis Thm 3.2.1, implicit form of the
    thesis digest §4.5), with C = Σ_i w_i x_i x_iᵀ, s = Σ_i w_i x_i, w_r = E†[:, r]:
    H_r = (1/T3)[Σ_i w_i x_ir z_i z_iᵀ − E† diag(C[:, r]) E†ᵀ − w_r (E† C[:, r])ᵀ
                 − (E† C[:, r]) w_rᵀ + 2 s_r w_r w_rᵀ],  T3 = Σ_i w_i t_i(t_i − 1)(t_i − 2).

* The rotation minimising Σ_r (Oᵀ H_r O)₁₂² in closed form (:func:`sidiwo_rotation`), giving
  discriminators D = Oᵀ E† (thesis Alg. 5, eq. 6.11) or, for SIDIWO, pseudo-centres from
  D† = E O and M1 (thesis Alg. 3 step 3): √ω = argmin ‖E O x − M1‖, μ_j = (E O)_j / x_j,
  projected to the simplex (topics) or clipped to [0, 1] (Bernoulli), routed by MAP (Alg. 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import scipy.sparse as sp

from streammom.decompose import Rotation2, Whitening, sidiwo_rotation, top_eigenpairs, whiten
from streammom.estimators import Family, NodeMoments
from streammom.mixture import fit_mixture_em
from streammom.model import Router, map_router
from streammom.projection import project_simplex

__all__ = [
    "Method",
    "Split",
    "compute_split",
    "refine_split_em",
]

Method = Literal["dsidiwo", "sidiwo"]
_CENTRE_FLOOR = 1e-6


@dataclass(frozen=True)
class Split:
    """A fitted 2-way split: the router and everything needed to explain or re-orient it.

    A split found from the rows alone, where the moments give none
    (:func:`streammom.refine.data_split`), has no ``rotation`` or ``whitening``."""

    router: Router
    discriminators: np.ndarray  # D = Oᵀ E†, (2, d)
    rotation: Rotation2 | None
    whitening: Whitening | None
    centres: np.ndarray | None = None  # (2, d) SIDIWO pseudo-centres / EM means
    mixing: np.ndarray | None = None  # (2,)
    quality: dict[str, float] = field(default_factory=dict)

    def swapped(self) -> Split:
        """The same split with the two children in the other order."""
        router = Router(self.router.weights[::-1].copy(), self.router.bias[::-1].copy(),
                        self.router.absolute)
        return replace(
            self,
            router=router,
            discriminators=self.discriminators[::-1].copy(),
            rotation=None if self.rotation is None else self.rotation.swapped(),
            centres=None if self.centres is None else self.centres[::-1].copy(),
            mixing=None if self.mixing is None else self.mixing[::-1].copy(),
        )


def _orientation_score(D: np.ndarray, reference: np.ndarray) -> float:
    """Σ_j |cos(d_j, ref_j)|: how well rows of D line up with the reference rows, in order."""
    num = np.abs(np.einsum("jd,jd->j", D, reference))
    den = np.linalg.norm(D, axis=1) * np.linalg.norm(reference, axis=1)
    return float(np.sum(num / np.maximum(den, np.finfo(float).tiny)))


def compute_split(
    moments: NodeMoments,
    *,
    family: Family = "bernoulli",
    method: Method = "dsidiwo",
    reference_discriminators: np.ndarray | None = None,
    random_state: int = 0,
) -> Split:
    """Compute the SIDIWO / D-SIDIWO 2-way split of a node from its moments.

    ``reference_discriminators`` (the previous split's D) picks, of the two equivalent optima,
    the one whose rows line up with the previous rows, so child ids stay stable across refits.
    Raises :class:`~streammom.decompose.NonPositiveEigenvalueError` when M2 has rank < 2.

    Quality signals (design §4): ``rotation_gap`` = (λ_max − λ_min)/(λ_max + λ_min) of G
    (1: a rotation diagonalises the slices; 0: no preferred split); ``eig_ratio`` = λ₂/λ₁ and
    ``spectral_gap`` = (λ₂ − λ₃)/λ₁ of M2.
    """
    d = moments.m1.shape[0]
    if d < 2:
        raise ValueError("a split needs at least 2 features")
    n_eig = 3 if d >= 4 else 2
    m2 = moments.m2
    if d < 4 and not isinstance(m2, np.ndarray):  # ARPACK needs k < d: materialise tiny M2
        m2 = np.asarray(m2 @ np.eye(d))
        m2 = (m2 + m2.T) / 2.0
    vals, vecs = top_eigenpairs(m2, n_eig, random_state=random_state)
    white = whiten(np.diag(vals[:2]), 2)  # validates positivity with the standard message
    white = Whitening(eigenvalues=white.eigenvalues, eigenvectors=vecs[:, :2])
    Epinv = white.pinv
    third = moments.third(Epinv)
    h, f = third[:, 1], third[:, 0] - third[:, 2]
    rotation = sidiwo_rotation(h, f)
    D = rotation.matrix.T @ Epinv
    lam3 = float(vals[2]) if n_eig == 3 else 0.0
    quality = {
        "rotation_gap": rotation.relative_gap,
        "eig_ratio": float(vals[1] / vals[0]),
        "spectral_gap": float((vals[1] - lam3) / vals[0]),
    }
    split = Split(
        router=Router(D, np.zeros(2), absolute=True),
        discriminators=D,
        rotation=rotation,
        whitening=white,
        quality=quality,
    )
    if method == "sidiwo":
        split = _sidiwo_centres(split, moments.m1, family)
    elif method != "dsidiwo":
        raise ValueError(f"method must be 'dsidiwo' or 'sidiwo', got {method!r}")
    if reference_discriminators is not None:
        swapped = split.swapped()
        if _orientation_score(swapped.discriminators, reference_discriminators) > (
            _orientation_score(split.discriminators, reference_discriminators)
        ):
            split = swapped
    return split


def _sidiwo_centres(split: Split, m1: np.ndarray, family: Family) -> Split:
    """Pseudo-centres and weights from D† = E O and M1 (thesis Alg. 3, step 3), MAP router.

    Falls back to the D-SIDIWO router (quality ``sidiwo_degenerate`` = 1) when a recovered
    √ω_j is not positive, where the pseudo-centre would blow up.
    """

    assert split.whitening is not None and split.rotation is not None  # a moment split
    A = split.whitening.factor @ split.rotation.matrix  # (d, 2) = E O
    A = A * np.where(A.sum(axis=0) < 0, -1.0, 1.0)
    x, *_ = np.linalg.lstsq(A, m1, rcond=None)
    quality = dict(split.quality)
    if not np.all(x > 1e-12):
        quality["sidiwo_degenerate"] = 1.0
        return replace(split, quality=quality)
    centres = (A / x).T
    centres = project_simplex(centres) if family == "multinomial" else np.clip(centres, 0.0, 1.0)
    mixing = x**2 / float(x @ x)
    quality["sidiwo_degenerate"] = 0.0
    router = map_router(centres, mixing, family, floor=_CENTRE_FLOOR)
    return replace(split, router=router, centres=centres, mixing=mixing, quality=quality)


def refine_split_em(
    split: Split,
    X: sp.csr_array,
    *,
    family: Family,
    weights: np.ndarray | None = None,
    tol: float = 1e-4,
    max_iter: int = 100,
) -> Split:
    """Per-split EM (thesis ch. 6 §6.3): a 2-component mixture started from the two children.

    The start is the mean and share of each side of the current router on ``X``; EM stops on
    ‖ΔM‖ < ``tol`` or ``max_iter``. The refined split routes by MAP. If one side is empty the
    split is returned unchanged.
    """

    n = X.shape[0]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    side = split.router.side(X)
    share = np.bincount(side, weights=w, minlength=2)
    if np.any(share <= 0):
        return split
    onehot = sp.csr_array((w, (side, np.arange(n))), shape=(2, n))
    sums = onehot @ X  # sparse when X is sparse
    means = (sums.toarray() if sp.issparse(sums) else np.asarray(sums)) / share[:, None]
    if family == "multinomial":
        means = np.maximum(means, _CENTRE_FLOOR)
        means = means / means.sum(axis=1, keepdims=True)
    result = fit_mixture_em(
        X, means, share / share.sum(), family=family, tol=tol, max_iter=max_iter,
        sample_weight=w,
    )
    quality = dict(split.quality)
    quality["em_iterations"] = float(result.n_iter)
    router = map_router(result.means, result.weights, family, floor=_CENTRE_FLOOR)
    return replace(split, router=router, centres=result.means, mixing=result.weights,
                   quality=quality)
