"""EM for mixtures of independent Bernoulli variables and single-topic (multinomial) mixtures.

Used after SVTD/ASVTD (thesis Ch. 4 §4.4: "raw moments → ASVTD → EM → MAP", EM is part of the
method because raw binary moments are biased) and after a SIDIWO split (thesis Ch. 6 §6.3,
optional EM per split). X stays sparse: every pass is one compiled walk over its rows
(:func:`streammom._kernels.em_pass`) that scores each row against the k components, normalises
and adds the row to the M-step's weighted sums Xᵀ(w ∘ R), O(nnz · k) with no (n, k)
temporaries (1.3–1.6× faster than the sparse products X @ Aᵀ and Xᵀ @ (w ∘ R) it replaces).

Log-likelihoods (thesis eq. 4.1 and eq. 3.4; digest part 1 §1.3):

* Bernoulli: log p(x | j) = Σ_h log(1 − μ_jh) + Σ_h x_h log(μ_jh / (1 − μ_jh)) (binary x).
* Multinomial: log p(x | j) = log t! − Σ_h log x_h! + Σ_h x_h log μ_jh, t = Σ_h x_h.

EM (thesis §4.4 / digest §5.5): E-step r_ij = softmax_j(log ω_j + log p(x_i | j)) in log space
with max subtraction; M-step ω_j = Σ_i w_i r_ij / Σ_i w_i, μ_j = Σ_i w_i r_ij x_i / Σ_i w_i r_ij
(Bernoulli, then clamped into [ε, 1 − ε]) or the normalised expected counts (multinomial, with
an exact floor at ε, :func:`~streammom.projection.floor_simplex`). Both clamps are the exact
constrained M-steps, so the likelihood never decreases. A component whose total responsibility
is ~0 keeps its previous centre. Stopping: ‖M_new − M_old‖_F < tol (thesis Ch. 6: 1e-4) or
``max_iter`` M-steps.

Deterministic annealing (Ueda & Nakano 1998, "Deterministic annealing EM algorithm", Neural
Networks 11(2), eq. 12): optional tempered passes before the EM, each an E-step at an inverse
temperature β ∈ (0, 1], r_ij ∝ (ω_j p(x_i | j))^β, then the same M-step. At β < 1 the
posterior is flatter, so the components move as a group out of the basin their start put them
in, and settle as β rises to 1; the plain EM that follows converges from there.

Optimism of a weighted fit (Takeuchi 1976; Konishi & Kitagawa, *Information Criteria and
Statistical Modeling*, 2008, §3.4): the streaming tree fits its mixture to reservoir rows that
each stand for w_i events (:mod:`streammom.refine`), and the fitted parameters θ̂ make the
rows' weighted log-likelihood ℓ_w(θ̂) = Σ_i w_i log p(x_i | θ̂) larger than the stream's own
would be at θ̂, by tr(J⁻¹K) in expectation (TIC), J the weighted information Σ_i w_i (−∇²) and
K the weighted scores' variance Σ_i w_i² ∇∇ᵀ. For a product (Bernoulli or multinomial)
component j every mean parameter's ratio K/J is the same, w̄_j = Σ_i w_i² r_ij / Σ_i w_i r_ij
(the component's rows' weight, averaged by weight), so the optimism is Σ_j p w̄_j with p the
parameters of one component: the features the rows hold, plus its share
(:func:`log_likelihood_optimism`). With equal weights it is the AIC's p·k: constant across
fits of the same k on the same rows. With unequal weights it is larger for a fit that puts
more components on heavy rows: a split of a heavy leaf's rows gains likelihood from the noise
in its few rows, multiplied by their weight. The streaming refinement compares fits on a code
set's rows by ``log_likelihood − optimism`` (:func:`corrected_log_likelihood`;
:mod:`streammom.refine`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln

from streammom import _kernels, shrinkage
from streammom._validation import as_csr, as_weights, with_int32_indices
from streammom.estimators import Family, check_family, check_family_data
from streammom.held_rates import UnheldRates, few_held_columns
from streammom.projection import floor_simplex

__all__ = [
    "MixtureEMResult",
    "SumsPrior",
    "WeightedRows",
    "corrected_log_likelihood",
    "fit_from_partition",
    "fit_mixture_em",
    "log_likelihood_matrix",
    "log_likelihood_optimism",
    "log_linear_params",
    "map_assign",
    "more_likely",
    "normalise_joint",
    "partition_sums",
    "prepare_parameters",
    "responsibilities",
]

MU_EPS = 1e-6  # Bernoulli clamp [ε, 1 − ε] and multinomial floor (thesis reference code)
_EMPTY_REL = 1e-10  # a component with Σ r < this × Σ w is "empty"


@dataclass(frozen=True)
class MixtureEMResult:
    """Fitted mixture: centres (k, d) as rows, weights (k,), and convergence diagnostics.

    ``log_likelihood`` is Σ_i w_i log p(x_i) at the returned parameters; ``history`` holds it
    after every iteration (history[0] at the initial, clamped parameters).
    ``prior_strengths``: a shrunk fit's τ (``fit_mixture_em(shrink=...)``), None otherwise.
    """

    means: np.ndarray
    weights: np.ndarray
    n_iter: int
    converged: bool
    log_likelihood: float
    history: tuple[float, ...] = ()
    #: A shrunk fit's per-code prior strengths τ as last estimated (:mod:`streammom.shrinkage`);
    #: None for a maximum-likelihood fit.
    prior_strengths: np.ndarray | None = None


@dataclass(frozen=True)
class SumsPrior:
    """Pseudo-counts for the M-step (MAP-EM under a conjugate Beta / Dirichlet prior): sums of
    events the rows do not hold, each component's in proportion 1 − λ_j to the rows' λ_j.

    With the rows' expected statistics ST_j = Σ_i w_i r_ij x_i and n_j = Σ_i w_i r_ij, the
    M-step uses S_j = λ_j ST_j + (1 − λ_j) ``sums``_j and N_j = λ_j n_j + (1 − λ_j) ``mass``_j
    in place of ST_j and n_j (μ_j = S_j / N_j, or S_j normalised for the multinomial family;
    ω_j ∝ N_j). The streaming tree's leaves' exact sums enter its refinement this way
    (:mod:`streammom.stream_sums`, design §5).
    """

    sums: np.ndarray  # (k, d)
    mass: np.ndarray  # (k,)
    share: np.ndarray  # (k,) λ_j in [0, 1]


def _mu_floor(d: int) -> float:
    return min(MU_EPS, 0.5 / d)


def prepare_parameters(
    means: Any, weights: Any, family: Family, n_features: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Validate (k, d) centres and (k,) weights and map them into the valid range.

    Bernoulli centres are clamped into [ε, 1 − ε]; multinomial centres are floored at ε and
    renormalised (exactly, :func:`floor_simplex`); weights must be ≥ 0 with a positive sum and
    are renormalised.
    """
    check_family(family)
    mu = np.array(means, dtype=float, ndmin=2)
    om = np.asarray(weights, dtype=float).ravel()
    k, d = mu.shape
    if n_features is not None and d != n_features:
        raise ValueError(f"means have {d} features, X has {n_features}")
    if om.shape != (k,):
        raise ValueError(f"weights must have shape ({k},), got {om.shape}")
    if not (np.isfinite(mu).all() and np.isfinite(om).all()):
        raise ValueError("means and weights must be finite")
    if (om < 0).any() or om.sum() <= 0:
        raise ValueError("weights must be non-negative with a positive sum")
    eps = _mu_floor(d)
    mu = np.clip(mu, eps, 1.0 - eps) if family == "bernoulli" else floor_simplex(mu, eps)
    return mu, om / om.sum()


def log_linear_params(mu: np.ndarray, om: np.ndarray, family: str
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Linear form of the log-joint: log p(x, j) = (X A)_ij + b_j (+ a per-row constant),
    for centres and weights already in the valid range (:func:`prepare_parameters`)."""
    with np.errstate(divide="ignore"):
        log_om = np.log(om)
    if family == "bernoulli":
        log1m = np.log1p(-mu)
        return np.log(mu) - log1m, log_om + log1m.sum(axis=1)
    return np.log(mu), log_om


def _row_constant(X: sp.csr_array, family: str) -> np.ndarray:
    """log t! − Σ_h log x_h! per row (multinomial coefficient); 0 for Bernoulli."""
    if family == "bernoulli":
        return np.zeros(X.shape[0])
    t = np.asarray(X.sum(axis=1)).ravel()
    per_entry = sp.csr_array((gammaln(X.data + 1.0), X.indices, X.indptr), shape=X.shape)
    return gammaln(t + 1.0) - np.asarray(per_entry.sum(axis=1)).ravel()


def _joint(X: sp.csr_array, mu: np.ndarray, om: np.ndarray, family: str) -> np.ndarray:
    A, b = log_linear_params(mu, om, family)
    L = np.asarray(X @ A.T) + b[None, :]
    if family == "multinomial":
        L += _row_constant(X, family)[:, None]
    return L


def normalise_joint(L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise log-sum-exp with max subtraction of the (n, k) joint log-likelihoods
    (:func:`log_likelihood_matrix`): (log p(x_i), responsibilities)."""
    m = L.max(axis=1)
    R = np.exp(L - m[:, None])
    s = R.sum(axis=1)
    R /= s[:, None]
    return m + np.log(s), R


def log_likelihood_optimism(mass: np.ndarray, mass_sq: np.ndarray, n_params: int) -> float:
    """The optimism of a fit's weighted log-likelihood (module docstring, TIC):
    Σ_j p · w̄_j over the components that hold rows, w̄_j = ``mass_sq``_j / ``mass``_j with
    ``mass``_j = Σ_i w_i r_ij and ``mass_sq``_j = Σ_i w_i² r_ij, p = ``n_params`` a component.

    >>> log_likelihood_optimism(np.array([10.0, 10.0]), np.array([10.0, 10.0]), 5)  # AIC: p·k
    10.0
    >>> log_likelihood_optimism(np.array([10.0, 40.0, 0.0]), np.array([10.0, 160.0, 0.0]), 5)
    25.0
    """
    total = float(mass.sum())
    held = mass > _EMPTY_REL * total
    return float(n_params * (mass_sq[held] / mass[held]).sum())


def corrected_log_likelihood(X: Any, fit: MixtureEMResult, family: Family, *,
                             sample_weight: Any = None) -> float:
    """``fit.log_likelihood`` on the weighted rows ``X`` net of its optimism (module docstring,
    TIC): two passes over the rows at the fit's parameters give Σ_i w_i r_ij and
    Σ_i w_i² r_ij, and p is the features the rows hold (plus the share, Bernoulli).
    ``fit`` must be a fit to these rows and weights. Several fits on the same rows:
    :class:`WeightedRows`."""
    return WeightedRows(X, fit.means.shape[1], family, sample_weight).corrected(fit)


def more_likely(new: MixtureEMResult, old: MixtureEMResult, X: Any, family: Family, *,
                sample_weight: Any = None) -> bool:
    """Whether ``new`` is more likely than ``old`` on the same weighted rows ``X``, each net of
    its optimism (:func:`corrected_log_likelihood`; the rows' share of the work done once)."""
    rows = WeightedRows(X, new.means.shape[1], family, sample_weight)
    return rows.corrected(new) > rows.corrected(old)


class WeightedRows:
    """Weighted rows on which fits are compared net of their optimism: what the optimism needs
    of the rows whatever the fit — CSR rows, weights, each row's constant, and p, the
    parameters of a component — built once for any number of fits."""

    def __init__(self, X: Any, d: int, family: Family, sample_weight: Any = None) -> None:
        self.X = with_int32_indices(as_csr(X, d))
        self.w = as_weights(sample_weight, self.X.shape[0])
        self.family = family
        self.const = _row_constant(self.X, family)
        seen = int(np.count_nonzero(np.bincount(self.X.indices, minlength=d)))
        self.n_params = seen + (1 if family == "bernoulli" else 0)  # the means, and the share

    def corrected(self, fit: MixtureEMResult) -> float:
        """``fit.log_likelihood`` net of its optimism on these rows
        (:func:`corrected_log_likelihood`)."""
        A, b = log_linear_params(*prepare_parameters(fit.means, fit.weights, self.family),
                                 self.family)
        AT = np.ascontiguousarray(A.T)
        Xc = self.X
        ST = np.empty((Xc.shape[1], b.shape[0]))  # the kernel's M-step sums, unused here
        masses = []
        for weight in (self.w, self.w * self.w):
            ST.fill(0.0)
            nk = np.zeros(b.shape[0])
            _kernels.em_pass(Xc.indptr, Xc.indices, Xc.data, weight, AT, b, self.const, ST, nk)
            masses.append(nk)
        return fit.log_likelihood - log_likelihood_optimism(masses[0], masses[1], self.n_params)


def log_likelihood_matrix(X: Any, means: Any, weights: Any, family: Family) -> np.ndarray:
    """(n, k) joint log p(x_i, Y = j) = log ω_j + log p(x_i | μ_j) (thesis eq. 4.1 / 3.4).

    Centres are taken as given after the clamp of :func:`prepare_parameters`.

    >>> L = log_likelihood_matrix(np.array([[1.0, 0.0]]), np.array([[0.5, 0.5]]), [1.0],
    ...                           "bernoulli")
    >>> round(float(L[0, 0]), 6)  # 2 log 0.5
    -1.386294
    """
    check_family(family)
    mu = np.array(means, dtype=float, ndmin=2)
    Xc = as_csr(X, mu.shape[1])
    check_family_data(Xc, family)
    mu, om = prepare_parameters(mu, weights, family)
    return _joint(Xc, mu, om, family)


def responsibilities(X: Any, means: Any, weights: Any, family: Family) -> np.ndarray:
    """(n, k) posteriors P(Y = j | x_i): the row-wise softmax of :func:`log_likelihood_matrix`."""
    return normalise_joint(log_likelihood_matrix(X, means, weights, family))[1]


def map_assign(X: Any, means: Any, weights: Any, family: Family) -> np.ndarray:
    """MAP cluster argmax_j log ω_j + log p(x | μ_j) (thesis eq. 4.2); ties to the lowest j."""
    return np.argmax(log_likelihood_matrix(X, means, weights, family), axis=1)


def partition_sums(X: Any, row_weight: np.ndarray, label: np.ndarray, k: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The M-step's statistics of a hard partition: (k, d) weighted sums Σ_{i: l_i = j} w_i x_i
    and (k,) masses Σ_{i: l_i = j} w_i, for ``label`` l_i in 0..k−1 (X sparse or dense).

    >>> sums, mass = partition_sums(np.array([[1.0, 0], [0, 2], [1, 1]]), np.ones(3),
    ...                             np.array([0, 1, 0]), 2)
    >>> sums.tolist(), mass.tolist()
    ([[2.0, 1.0], [0.0, 2.0]], [2.0, 1.0])
    """
    n = label.shape[0]
    onehot = sp.csr_array((row_weight, (label, np.arange(n))), shape=(k, n))
    sums = onehot @ X
    sums = sums.toarray() if sp.issparse(sums) else sums
    return np.asarray(sums), np.bincount(label, weights=row_weight, minlength=k)


def fit_from_partition(rows: Any, row_weight: np.ndarray, label: np.ndarray, k: int, *,
                       family: Family, max_iter: int, tol: float) -> MixtureEMResult:
    """EM from a hard partition of the weighted ``rows`` into ``k`` parts (``label``): each
    part's weighted mean row (Bernoulli) or normalised token counts (multinomial) and its share
    of the weight start :func:`fit_mixture_em`."""
    sums, mass = partition_sums(rows, row_weight, label, k)
    den = sums.sum(axis=1) if family == "multinomial" else mass
    means = sums / np.maximum(den, np.finfo(float).tiny)[:, None]
    return fit_mixture_em(rows, means, mass / mass.sum(), family=family, tol=tol,
                          max_iter=max_iter, sample_weight=row_weight)


def _m_step(
    ST: np.ndarray,
    nk: np.ndarray,
    mu_old: np.ndarray,
    family: str,
    prior: SumsPrior | None,
    shrink: _Shrink | None,
    eps: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """M-step from the expected sufficient statistics ST (d, k) = Xᵀ (w ∘ R) and
    nk (k,) = Σ_i w_i r_ij (:func:`streammom._kernels.em_pass`), with ``prior``'s
    pseudo-counts added (:class:`SumsPrior`) and, with ``shrink``, the Bernoulli rates shrunk
    toward the pooled rates (:mod:`streammom.shrinkage`). ``eps``: the clamp, that of the
    centres' d columns (ST may hold some of them only: :mod:`streammom.held_rates`). Returns
    (μ, ω, the components with mass, whose centres were updated)."""
    S = ST.T  # (k, d) expected (weighted) sufficient statistics
    if prior is not None:
        lam = prior.share
        S = lam[:, None] * S + (1.0 - lam)[:, None] * prior.sums
        nk = lam * nk + (1.0 - lam) * prior.mass
    total = float(nk.sum())
    empty = nk <= _EMPTY_REL * total
    mu = mu_old.copy()
    full = ~empty
    if family == "bernoulli":
        rates = S[full] / nk[full, None] if shrink is None else shrink.rates(S, nk)[full]
        mu[full] = np.clip(rates, eps, 1.0 - eps)
    else:
        counts = S[full]
        has_tokens = counts.sum(axis=1) > 0
        mu[np.flatnonzero(full)[has_tokens]] = floor_simplex(counts[has_tokens], eps)
    return mu, nk / total, full


class _Shrink:
    """The empirical-Bayes shrinkage of a shrunk EM's M-steps (:mod:`streammom.shrinkage`):
    τ estimated at the M-steps of :data:`~streammom.shrinkage.TAU_STEPS` (one per code, with
    ``pulled`` toward a common one: :func:`~streammom.shrinkage.pulled_prior_strengths`), or
    given (``tau``: a shrunk fit's, carried on to a few more steps) and then kept."""

    def __init__(self, tau: np.ndarray | None = None, *, pulled: bool = False) -> None:
        self.steps = 0
        self.tau = tau
        self.fixed = tau is not None
        self.strengths = (shrinkage.pulled_prior_strengths if pulled
                          else shrinkage.prior_strengths)

    def rates(self, S: np.ndarray, nk: np.ndarray) -> np.ndarray:
        m = shrinkage.pooled_rates(S, nk)
        if not self.fixed and self.steps in shrinkage.TAU_STEPS:
            self.tau = self.strengths(S, nk, m)
        self.steps += 1
        assert self.tau is not None
        return shrinkage.shrunk_rates(S, nk, self.tau, m)


def fit_mixture_em(
    X: Any,
    means_init: Any,
    weights_init: Any,
    *,
    family: Family,
    tol: float = 1e-4,
    max_iter: int = 100,
    sample_weight: Any = None,
    anneal: Sequence[float] = (),
    prior: SumsPrior | None = None,
    shrink: bool | np.ndarray | Literal["pulled"] = False,
) -> MixtureEMResult:
    """EM for a k-component Bernoulli or multinomial mixture from (means_init, weights_init).

    ``means_init`` is (k, d), ``weights_init`` (k,). Iterates E-step / M-step (module
    docstring) until ‖M_t − M_{t−1}‖_F < ``tol`` (converged) or ``max_iter`` M-steps. X is
    never densified. Deterministic. ``anneal``: inverse temperatures in (0, 1], one tempered
    pass each before the EM (module docstring, deterministic annealing); they count in neither
    ``n_iter`` nor ``history``. ``prior``: pseudo-counts added in every M-step
    (:class:`SumsPrior`; MAP-EM, ``log_likelihood`` is then still the rows' own). ``shrink``
    (Bernoulli): every M-step shrinks the rates toward the pooled rates by empirical Bayes
    (:mod:`streammom.shrinkage`; ``log_likelihood`` is again the rows' own); an array instead
    of True is the (d,) prior strengths τ to use throughout, none estimated (a shrunk fit's
    ``prior_strengths``, for a few more steps of it); ``"pulled"`` estimates each code's
    strength pulled toward a common one (:func:`streammom.shrinkage.pulled_prior_strengths`).
    A Bernoulli EM whose rows (and prior) hold at most a quarter of the d columns runs on
    those columns, the others' rates carried as one constant a component
    (:mod:`streammom.held_rates`): the same fit up to rounding, at O(k · d) once instead of
    once a step.
    """
    check_family(family)
    if tol < 0 or max_iter < 0:
        raise ValueError("tol and max_iter must be non-negative")
    betas = np.asarray(anneal, dtype=float).ravel()
    if not (np.isfinite(betas).all() and (betas > 0).all() and (betas <= 1).all()):
        raise ValueError("anneal's inverse temperatures must be in (0, 1]")
    mu0 = np.array(means_init, dtype=float, ndmin=2)
    Xc = as_csr(X, mu0.shape[1])
    check_family_data(Xc, family)
    w = as_weights(sample_weight, Xc.shape[0])
    if w.sum() <= 0:
        raise ValueError("the sample weights sum to 0")
    mu, om = prepare_parameters(mu0, weights_init, family)
    const = _row_constant(Xc, family)
    d = mu.shape[1]
    eps = _mu_floor(d)
    shrinker = _shrinker(shrink, family, d)

    Xc = with_int32_indices(Xc)
    held = None if family != "bernoulli" else few_held_columns(
        Xc, None if prior is None else prior.sums)
    unheld = None if held is None else UnheldRates.split(mu, held, eps)
    if unheld is not None:  # module held_rates: the EM on the columns the rows hold
        Xc, mu = unheld.restrict(Xc), mu[:, unheld.held]
        if prior is not None:
            prior = SumsPrior(prior.sums[:, unheld.held], prior.mass, prior.share)
        if shrinker is not None and shrinker.tau is not None:
            shrinker.tau = shrinker.tau[unheld.held]
    ST = np.empty((Xc.shape[1], mu.shape[0]))
    nk = np.empty(mu.shape[0])

    def e_step(mu: np.ndarray, om: np.ndarray, beta: float = 1.0) -> float:
        """Σ_i w_i log p(x_i) at (μ, ω) (β = 1); leaves the M-step's statistics in ST, nk.
        β < 1 tempers the responsibilities, r_ij ∝ exp(β log p(x_i, j)): β scales the linear
        form, and the returned value is then the tempered one (not a log-likelihood)."""
        A, b = log_linear_params(mu, om, family)
        if unheld is not None:
            b = b + unheld.offset
        if beta != 1.0:
            A, b = beta * A, beta * b
        ST.fill(0.0)
        nk.fill(0.0)
        return float(_kernels.em_pass(Xc.indptr, Xc.indices, Xc.data, w,
                                      np.ascontiguousarray(A.T), b, const, ST, nk))

    def m_step(mu: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """(μ, ω, the unheld columns' squared change) of one M-step."""
        mu_new, om, full = _m_step(ST, nk, mu, family, prior, shrinker, eps)
        return mu_new, om, 0.0 if unheld is None else unheld.advance(full)

    for beta in betas:
        e_step(mu, om, float(beta))
        mu, om, _ = m_step(mu)

    ll = e_step(mu, om)
    history = [ll]
    converged = False
    n_iter = 0
    while n_iter < max_iter:
        n_iter += 1
        mu_new, om, unheld_change = m_step(mu)
        delta = float(np.sqrt(np.linalg.norm(mu_new - mu) ** 2 + unheld_change)
                      if unheld_change else np.linalg.norm(mu_new - mu))
        mu = mu_new
        ll = e_step(mu, om)
        history.append(ll)
        if delta < tol:
            converged = True
            break
    tau = None if shrinker is None else shrinker.tau
    if unheld is not None:
        mu = unheld.scatter(mu)
        if tau is not None:
            tau = unheld.scatter_strengths(tau, shrink)
    return MixtureEMResult(
        means=mu,
        weights=om,
        n_iter=n_iter,
        converged=converged,
        log_likelihood=ll,
        history=tuple(history),
        prior_strengths=tau,
    )


def _shrinker(shrink: bool | np.ndarray | Literal["pulled"], family: str, d: int
              ) -> _Shrink | None:
    """The M-steps' shrinkage for ``fit_mixture_em``'s ``shrink`` (validated), or None."""
    pulled = isinstance(shrink, str)
    if pulled and shrink != "pulled":
        raise ValueError(f"shrink must be a bool, prior strengths or 'pulled', got {shrink!r}")
    if isinstance(shrink, np.ndarray):
        tau = np.asarray(shrink, dtype=float)
        if tau.shape != (d,) or not (np.isfinite(tau).all() and (tau >= 0).all()):
            raise ValueError(f"prior strengths must be {d} finite numbers ≥ 0")
    elif not shrink:
        return None
    else:
        tau = None
    if family != "bernoulli":
        raise ValueError("shrink applies to the Bernoulli family only")
    return _Shrink(tau, pulled=pulled)
