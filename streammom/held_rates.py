"""A Bernoulli EM on the columns its rows hold: the other columns' rates as one number a component.

A refit's EM (:func:`streammom.mixture.fit_mixture_em`) runs on a few thousand rows of a wide
code set: the EM fits of a 2,000-event ICD-shaped stream (d ≈ 9,000 codes) run on rows that
hold under 10 % of them for the most part (the rest 10–30 %), and 1,000 rows of a 50,000-code
vocabulary hold 1,676. Each EM step, though, costs
O(k · d) in its dense parts (log μ and log(1 − μ) for the linear form, the M-step's division,
clip and shrinkage, the statistics' (d, k) block), against O(nnz · k) for the rows' own pass.

A column h that no row holds (x_ih = 0 for every i, and no pseudo-count of the prior's sums)
has expected statistics S_jh = 0 in every M-step, so (module :mod:`streammom.mixture`):

* a component j with mass gets μ_jh = ε there after its first M-step (the rate 0, clamped;
  with the shrinkage the pooled rate m_h is 0 too, so the shrunk rate is 0 as well), and a
  component without mass keeps its previous rate, as everywhere;
* in the log-likelihood those columns enter only through log p(x | j)'s Σ_h log(1 − μ_jh),
  a constant of the component: c_j = Σ_{h unheld} log(1 − μ_jh) (thesis eq. 4.1, x_h = 0).

So the EM runs on the held columns alone with c_j added to each component's bias, and c_j,
the convergence test's ‖M_new − M_old‖_F and the returned centres account for the unheld
columns exactly: O(k · d) once a fit instead of once a step. The result equals the full
computation in exact arithmetic (rounding aside: c_j is summed apart from the held columns).

Used when the held columns are at most :data:`HELD_SHARE` of d (Bernoulli only: the
multinomial floor couples every column of a centre through its water level).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from streammom.held_columns import held_columns
from streammom.shrinkage import TAU_RANGE

__all__ = ["HELD_SHARE", "UnheldRates", "few_held_columns", "on_few_held_columns"]

#: The EM works on the held columns when they are at most this share of the columns: there its
#: dense parts cost a quarter of the full ones or less. Most fits of ICD-shaped code streams
#: (d ≈ 9,000) are there; the 500-code synthetic streams, whose rows hold 30–100 % of the
#: columns, keep the full computation.
HELD_SHARE = 0.25


def few_held_columns(X: sp.csr_array, prior_sums: np.ndarray | None = None
                     ) -> np.ndarray | None:
    """The columns ``X`` (canonical CSR) or the prior's pseudo-count sums hold, ascending, when
    they are at most :data:`HELD_SHARE` of the columns; None otherwise (the work then runs on
    every column). O(nnz log nnz + k · d with a prior).

    >>> X = sp.csr_array(np.eye(2, 10))
    >>> few_held_columns(X).tolist(), few_held_columns(sp.csr_array(np.eye(2, 4)))
    ([0, 1], None)
    """
    d = X.shape[1]
    cols = np.unique(X.indices)
    if prior_sums is not None:
        cols = np.union1d(cols, np.flatnonzero(np.any(prior_sums != 0, axis=0)))
    return cols if cols.size <= HELD_SHARE * d else None


def on_few_held_columns(X: sp.csr_array) -> tuple[sp.csr_array, np.ndarray | None]:
    """(``X`` on the columns it holds, those columns) when they are few
    (:func:`few_held_columns`); (``X``, None) otherwise.

    >>> Xc, cols = on_few_held_columns(sp.csr_array(np.eye(2, 10)))
    >>> Xc.shape, cols.tolist(), on_few_held_columns(sp.csr_array(np.eye(2, 4)))[1]
    ((2, 2), [0, 1], None)
    """
    cols = few_held_columns(X)
    return (X, None) if cols is None else (held_columns(X, cols)[0], cols)


@dataclass
class UnheldRates:
    """The rates of the columns no row holds (module docstring), one block per component.

    ``start`` (k, u): their clamped starting rates; ``reset`` (k,): whether the component has
    had an M-step with mass (its unheld rates are then ε); ``offset`` (k,): c_j.
    """

    held: np.ndarray
    unheld: np.ndarray
    start: np.ndarray
    reset: np.ndarray
    offset: np.ndarray
    eps: float

    @classmethod
    def split(cls, mu: np.ndarray, held: np.ndarray, eps: float) -> UnheldRates:
        """The unheld part of the clamped (k, d) centres ``mu``."""
        unheld = np.setdiff1d(np.arange(mu.shape[1]), held, assume_unique=True)
        start = mu[:, unheld]
        return cls(held, unheld, start, np.zeros(mu.shape[0], dtype=bool),
                   np.log1p(-start).sum(axis=1), eps)

    def restrict(self, X: sp.csr_array) -> sp.csr_array:
        """``X`` (canonical CSR, no stored column outside the held ones) on the held columns."""
        return held_columns(X, self.held)[0]

    def advance(self, full: np.ndarray) -> float:
        """One M-step in which the components ``full`` had mass: their unheld rates become ε.
        Returns the squared change of the unheld rates (for the ‖M_new − M_old‖_F test)."""
        new = full & ~self.reset
        if not new.any():
            return 0.0
        change = float(((self.start[new] - self.eps) ** 2).sum())
        self.reset |= new
        self.offset[new] = self.unheld.size * np.log1p(-self.eps)
        return change

    def scatter(self, mu_held: np.ndarray) -> np.ndarray:
        """The (k, d) centres: ``mu_held`` on the held columns, the unheld rates elsewhere."""
        out = np.empty((mu_held.shape[0], self.held.size + self.unheld.size))
        out[:, self.held] = mu_held
        out[:, self.unheld] = np.where(self.reset[:, None], self.eps, self.start)
        return out

    def scatter_strengths(self, tau_held: np.ndarray, given: bool | np.ndarray) -> np.ndarray:
        """The (d,) prior strengths of a shrunk fit: ``tau_held`` on the held columns; elsewhere
        the strengths ``given`` (an array), or the top of the search's range, which
        :func:`streammom.shrinkage.prior_strengths` gives every code no row holds."""
        out = (np.array(given, dtype=float) if isinstance(given, np.ndarray)
               else np.full(self.held.size + self.unheld.size, TAU_RANGE[1]))
        out[self.held] = tau_held
        return out
