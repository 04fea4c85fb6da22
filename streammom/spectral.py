"""Flat k-cluster mixtures by the spectral method of moments plus EM (scikit-learn style).

Pipeline (thesis Ch. 4 §4.4, "raw moments → ASVTD → EM → MAP"):

1. Decompose the moments into centres M and weights ω:
   ``method="asvtd"`` — implicit whitened slices from the data (thesis Alg. 2; O(nnz · k²));
   ``method="svtd"`` — explicit dense moments M1, M2, M3 then SVTD (thesis Alg. 1; d ≤ 200);
   ``method="jacobi"`` — implicit slices, O from Jacobi joint diagonalisation of all of them.
   Bernoulli data use raw moments (biased diagonals, thesis Thm 4.3.1); count data
   (``family="multinomial"``) the unbiased single-topic estimators (thesis Thm 3.2.1).
2. Map the output into the valid range (digest §7 pitfall 7): Bernoulli centres clipped into
   [ε, 1 − ε]; topics projected onto the simplex (Duchi et al. 2008) then floored at ε; ω
   projected onto the simplex (not squared) and floored at ε before EM, so that no component
   starts dead.
3. EM (``em=True``) until ‖ΔM‖_F < tol (thesis Ch. 6), then MAP (thesis eq. 4.2).

Columns are put in a canonical order — weight descending, ties by index — so two fits of the
same data are byte-identical.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streammom._validation import as_csr
from streammom.base import Estimator
from streammom.decompose import (
    SpectralDecomposition,
    asvtd,
    svtd,
)
from streammom.estimators import (
    FAMILY_OPTIONS,
    check_family_data,
    explicit_moments,
    resolve_family,
)
from streammom.mixture import (
    MixtureEMResult,
    fit_mixture_em,
    log_likelihood_matrix,
    prepare_parameters,
)
from streammom.params import FLAG, Interval, Options, Param
from streammom.projection import clip_unit, floor_simplex, project_simplex

__all__ = ["SpectralMixture"]

_METHODS = ("asvtd", "svtd", "jacobi")
_EPS = 1e-6
_WEIGHT_FLOOR = 1e-6


def valid_parameters(
    decomposition: SpectralDecomposition, family: str
) -> tuple[np.ndarray, np.ndarray]:
    """(means (k, d), weights (k,)) of a decomposition mapped into the family's valid range."""
    return family_range(decomposition.means, decomposition.weights, family)


def family_range(
    means: np.ndarray, weights: np.ndarray, family: str
) -> tuple[np.ndarray, np.ndarray]:
    """Raw moment estimates (means (k, d), weights (k,)) mapped into the family's valid range
    (module docstring, step 2)."""
    d = means.shape[1]
    eps = min(_EPS, 0.5 / d)
    if family == "bernoulli":
        means = clip_unit(means, eps)
    else:
        means = floor_simplex(project_simplex(means), eps)
    k = means.shape[0]
    weights = floor_simplex(weights, min(_WEIGHT_FLOOR, 0.5 / k))
    return means, weights


class SpectralMixture(Estimator):
    """Mixture of independent Bernoulli / single-topic multinomial fitted by SVTD/ASVTD + EM.

    Parameters
    ----------
    n_components : int >= 1, default 2
        Number of mixture components k (≤ number of features).
    family : {"auto", "bernoulli", "multinomial"}, default "auto"
        Binary data (disease codes) or counts (bag of words); ``"auto"``: Bernoulli when X is
        binary, else multinomial (:func:`streammom.estimators.resolve_family`), as ``family_``.
    method : {"asvtd", "svtd", "jacobi"}, default "asvtd"
        How the moments are decomposed (module docstring).
    em : bool, default True
        Refine the method-of-moments estimate with EM (part of the method for binary data).
    tol : float >= 0, default 1e-4
    max_iter : int >= 0, default 100
        EM stops when ‖M_t − M_{t−1}‖_F < tol or after max_iter iterations.
    random_state : int >= 0, default 0
        Seeds the Lanczos start vector of the whitening step (large d); results are
        deterministic.
    slice_criterion : {"relative", "absolute"}, default "relative"
        How SVTD picks the slice r that gives O: largest minimum eigen-gap of H_r relative to
        its largest |eigenvalue| (default; better on noisy raw moments) or absolute (the
        thesis's Remark 2.1.2). Also the starting point of ``method="jacobi"``.

    Attributes
    ----------
    means_ : ndarray (k, d)
    weights_ : ndarray (k,)
        The fitted components, in canonical order (heaviest first).
    n_iter_, converged_ : int, bool
        EM iterations and convergence (0 and False when ``em=False``).
    log_likelihood_ : float
        Σᵢ log p(xᵢ) under the fitted mixture.
    n_features_in_ : int
    decomposition_ : SpectralDecomposition
        The raw method-of-moments result (:mod:`streammom.decompose`).
    moment_means_, moment_weights_ : ndarray
        The clipped method-of-moments estimate that initialised EM (its own canonical order).

    Examples
    --------
    >>> X = np.repeat([[1.0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], [30, 10], axis=0)
    >>> model = SpectralMixture(2).fit(X)
    >>> model.predict(X[[0, 39]]).tolist(), model.weights_.round(2).tolist()
    ([0, 1], [0.75, 0.25])
    """

    _parameters = (
        Param("n_components", 2, (Interval(int, 1, None),), "mixture components k (<= d)"),
        Param("family", "auto", (Options(FAMILY_OPTIONS),),
              "bernoulli or multinomial data; auto: bernoulli if X is binary"),
        Param("method", "asvtd", (Options(_METHODS),), "how the moments are decomposed"),
        Param("em", True, (FLAG,), "refine the moment estimate with EM"),
        Param("tol", 1e-4, (Interval(float, 0.0, None),), "EM stops when the means move less"),
        Param("max_iter", 100, (Interval(int, 0, None),), "EM iteration cap"),
        Param("random_state", 0, (Interval(int, 0, None),), "seed of the Lanczos start"),
        Param("slice_criterion", "relative", (Options(("relative", "absolute")),),
              "how SVTD picks the slice that gives O"),
    )

    def __init__(
        self,
        n_components: int = 2,
        *,
        family: str = "auto",
        method: str = "asvtd",
        em: bool = True,
        tol: float = 1e-4,
        max_iter: int = 100,
        random_state: int = 0,
        slice_criterion: str = "relative",
    ) -> None:
        self.n_components = n_components
        self.family = family
        self.method = method
        self.em = em
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.slice_criterion = slice_criterion

    def _check_params(self) -> int:
        """Validate the parameters against the table; the integer seed."""
        self._validate_params()
        return int(self.random_state)

    # -- fitting ------------------------------------------------------------------------------

    def _decompose(self, X: Any, sample_weight: Any, seed: int) -> SpectralDecomposition:
        k = int(self.n_components)
        if self.method == "svtd":
            M1, M2, M3 = explicit_moments(X, self.family_, sample_weight)
            return svtd(M1, M2, M3, k, slice_criterion=self.slice_criterion, random_state=seed)
        rotation = "jacobi" if self.method == "jacobi" else "slice"
        return asvtd(
            X, k, self.family_, sample_weight, rotation=rotation,
            slice_criterion=self.slice_criterion, random_state=seed,
        )

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> SpectralMixture:
        """Fit on X (n, d): scipy.sparse or dense, non-negative (binary for Bernoulli)."""
        seed = self._check_params()
        Xc = as_csr(X)
        self.family_ = resolve_family(self.family, Xc)
        check_family_data(Xc, self.family_)
        n, d = Xc.shape
        k = int(self.n_components)
        if k > d:
            raise ValueError(f"n_components={k} exceeds the number of features d={d}")
        if n < 2:
            raise ValueError("need at least 2 samples")
        dec = self._decompose(Xc, sample_weight, seed)
        means, weights = valid_parameters(dec, self.family_)
        order0 = _canonical_order(weights)
        self.decomposition_ = dec
        self.moment_means_, self.moment_weights_ = means[order0], weights[order0]
        if self.em:
            res = fit_mixture_em(
                Xc, means, weights, family=self.family_, tol=self.tol,
                max_iter=int(self.max_iter), sample_weight=sample_weight,
            )
        else:
            means, weights = prepare_parameters(means, weights, self.family_)
            res = MixtureEMResult(means, weights, 0, False, float("nan"))
        order = _canonical_order(res.weights)
        self.means_ = np.ascontiguousarray(res.means[order])
        self.weights_ = np.ascontiguousarray(res.weights[order])
        self.n_iter_ = res.n_iter
        self.converged_ = res.converged
        self.em_history_ = res.history
        self.n_features_in_ = d
        self.log_likelihood_ = (
            res.log_likelihood if self.em else float(self.score_samples(Xc).sum())
        )
        return self

    def fit_predict(self, X: Any, y: Any = None, sample_weight: Any = None) -> np.ndarray:
        """Fit, then return the MAP cluster of every row of X."""
        return self.fit(X, sample_weight=sample_weight).predict(X)

    # -- inference ----------------------------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "means_"):
            raise RuntimeError("this SpectralMixture is not fitted yet; call fit(X) first")

    def _joint(self, X: Any) -> np.ndarray:
        self._check_fitted()
        Xc = as_csr(X, self.n_features_in_)
        return log_likelihood_matrix(Xc, self.means_, self.weights_, self.family_)

    def predict(self, X: Any) -> np.ndarray:
        """MAP cluster argmax_j log ω_j + log p(x | μ_j) (thesis eq. 4.2); ties to the lowest j."""
        return np.argmax(self._joint(X), axis=1)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Posterior P(Y = j | x) (n, k), rows summing to 1 (log-sum-exp with max subtraction)."""
        L = self._joint(X)
        L -= L.max(axis=1, keepdims=True)
        P = np.exp(L)
        return P / P.sum(axis=1, keepdims=True)

    def score_samples(self, X: Any) -> np.ndarray:
        """log p(x_i) under the fitted mixture."""
        L = self._joint(X)
        m = L.max(axis=1)
        return m + np.log(np.exp(L - m[:, None]).sum(axis=1))

    def score(self, X: Any, y: Any = None) -> float:
        """Mean log-likelihood per sample."""
        return float(self.score_samples(X).mean())


def _canonical_order(weights: np.ndarray) -> np.ndarray:
    """Weight descending, ties by index (stable sort)."""
    return np.argsort(-np.asarray(weights), kind="stable")
