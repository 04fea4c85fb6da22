"""Eigen-solvers of the streaming engine: warm-started top eigenpairs of a node's M2.

A refit needs the top eigenpairs of every recomputed node's second moment M2 (d × d, given
only as products with its packed sums) and a starting basis for every new child. Neither may
cost a d × d eigendecomposition at large d (design §3, "refit cost"):

* :func:`block_krylov_top` — Rayleigh–Ritz on span[V, AV], iterated (a block Davidson step),
  warm-started from the node's tracked basis: a refit costs a few products with C instead of a
  cold Lanczos run; ARPACK (:func:`streammom.decompose.top_eigenpairs`) is the fallback.
* :class:`NodeEigensolver` — the engine's use of it: seeds derived from (``random_state``,
  node id, salt), so every solve is deterministic; the tracked basis of a node; a child's basis
  from its reservoir rows; one reusable d × d float32 work buffer (:class:`ScratchBuffer`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streammom.decompose import top_eigenpairs
from streammom.held_columns import held_columns, scatter_rows

__all__ = ["NodeEigensolver", "ScratchBuffer", "block_krylov_top", "complete_basis",
           "gram_operator"]

Matmul = Callable[[np.ndarray], np.ndarray]

EIG_TOL = 1e-3  # residual ‖Au − θu‖ ≤ EIG_TOL·|θ₁|: far inside the basis_tol the basis allows
EIG_WARM_ITER = 40
EIG_COLD_ITER = 200
CHILD_BASIS_ITER = 8
#: New Krylov directions below this share of ‖AV‖ add nothing (the space is invariant there).
KRYLOV_RANK_TOL = 1e-10
SPARSE_BASIS_MIN_ROWS = 4


def complete_basis(V: np.ndarray, m: int, d: int, seed: int) -> np.ndarray:
    """Orthonormalise V (d × ≤m) and pad it to m columns with a seeded complement."""
    Q, _ = np.linalg.qr(V) if V.shape[1] else (np.zeros((d, 0)), None)
    if Q.shape[1] >= m:
        return np.ascontiguousarray(Q[:, :m])
    extra = np.random.default_rng(seed).standard_normal((d, m - Q.shape[1]))
    extra -= Q @ (Q.T @ extra)
    Q2, _ = np.linalg.qr(extra)
    return np.ascontiguousarray(np.hstack([Q, Q2]))


def block_krylov_top(
    matmul: Matmul, V: np.ndarray, *, k: int, tol: float, max_iter: int
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Top eigenpairs by Rayleigh–Ritz on span[V, AV], iterated (a block Davidson step).

    Returns (values desc, vectors, converged) for the p = V.shape[1] leading Ritz pairs:
    converged once the k leading residuals ‖A u − θ u‖ are ≤ tol·|θ₁|, else the last iterate
    after ``max_iter`` iterations. One product with p columns per iteration (A V is carried
    over); deterministic.
    """
    p = V.shape[1]
    AV = matmul(V)
    for _ in range(max_iter):
        Wd = AV - V @ (V.T @ AV)
        Wd -= V @ (V.T @ Wd)
        Wq, Rw = np.linalg.qr(Wd)
        floor = KRYLOV_RANK_TOL * max(float(np.linalg.norm(AV)), np.finfo(float).tiny)
        if np.min(np.abs(np.diag(Rw)), initial=np.inf) <= floor:
            Wq = _new_directions(Wd, V, floor)
        AW = matmul(Wq)
        K = np.hstack([V, Wq])
        AK = np.hstack([AV, AW])
        H = K.T @ AK
        theta, Y = np.linalg.eigh((H + H.T) / 2.0)
        order = np.argsort(theta)[::-1][:p]
        theta, Y = theta[order], Y[:, order]
        V, AV = K @ Y, AK @ Y
        R = AV[:, :k] - V[:, :k] * theta[:k]
        scale = max(abs(float(theta[0])), np.finfo(float).tiny)
        if float(np.max(np.linalg.norm(R, axis=0))) <= tol * scale:
            return theta, V, True
    return theta, V, False


def gram_operator(X: sp.csr_array, w: np.ndarray, shift: np.ndarray | None, scale: float
                  ) -> Matmul:
    """B ↦ (Xᵀ diag(w) X B − diag(shift) B) / scale for a (d,) or (d, p) B, without forming
    the d × d matrix: O(nnz(X) · p) a product (Xᵀ built once, for the solver's many calls).
    ``shift`` None: no diagonal term."""
    d = X.shape[1]
    Xt = X.T

    def matmul(B: np.ndarray) -> np.ndarray:
        B2 = np.asarray(B, dtype=np.float64).reshape(d, -1)
        out = Xt @ (w[:, None] * (X @ B2))
        if shift is not None:
            out -= shift[:, None] * B2
        return (out / scale).reshape(np.shape(B))

    return matmul


def _new_directions(Wd: np.ndarray, V: np.ndarray, floor: float) -> np.ndarray:
    """The orthonormal directions of ``Wd`` (already orthogonal to V) above ``floor``.

    On a rank-deficient operator (fewer non-zero eigenvalues than the block has columns) part
    of the new block is rounding noise; a plain QR would turn it into unit vectors that are not
    orthogonal to V, and the Rayleigh–Ritz step on [V, W] would then be wrong (no
    convergence, and a fallback whose random restarts differ from call to call). A pivoted QR
    keeps the directions that carry weight; they are orthogonalised against V once more.
    """
    Q, R, _ = scipy.linalg.qr(Wd, mode="economic", pivoting=True)
    r = int(np.count_nonzero(np.abs(np.diag(R)) > floor))
    if r == 0:
        return np.zeros((V.shape[0], 0))
    W = Q[:, :r] - V @ (V.T @ Q[:, :r])
    return np.linalg.qr(W)[0]


class ScratchBuffer:
    """A d × d float32 work buffer reused by the refits (a fresh 4d² bytes would be
    page-faulted in on every refit)."""

    def __init__(self) -> None:
        self._buf: np.ndarray | None = None

    def get(self, d: int) -> np.ndarray:
        if self._buf is None or self._buf.shape != (d, d):
            self._buf = np.zeros((d, d), dtype=np.float32)
        return self._buf


@dataclass(frozen=True)
class NodeEigensolver:
    """The engine's eigen-solves, seeded per node: ``seed(node, salt)`` is a function of
    (``random_state``, node id, salt) only, so a refit is reproducible byte for byte."""

    random_state: int
    basis_dim: int
    family: str
    scratch: ScratchBuffer = field(default_factory=ScratchBuffer)

    def seed(self, nid: int, salt: int = 0) -> int:
        return int(np.random.default_rng([self.random_state, nid, salt, 7]).integers(2**31))

    def basis_from_rows(
        self, X: sp.csr_array, nid: int, d: int, start: np.ndarray | None = None
    ) -> np.ndarray:
        """Top-m eigenvectors of the M2 estimated from reservoir rows (cheap sparse operator).

        The solve runs on the columns the rows hold (:mod:`streammom.held_columns`: M2 is zero
        elsewhere, so are its eigenvectors of positive eigenvalue); the result is scattered
        back and padded to an orthonormal m-basis of R^d with a seeded complement. ``start``
        (the parent's basis for a new child) warm-starts a few block Krylov steps (at most
        ``CHILD_BASIS_ITER``); each product costs O(nnz(X)·m). The multinomial family
        subtracts the diagonal of column sums (the single-topic M2 estimator, thesis
        Thm 3.2.1, up to its normaliser, which does not change eigenvectors).
        """
        m = min(self.basis_dim, d)
        held, cols = held_columns(X)
        vecs = self._held_top_vectors(held, nid, min(m, cols.size),
                                      None if start is None else start[cols])
        return complete_basis(scatter_rows(vecs, cols, d), m, d, self.seed(nid, 1))

    def _held_top_vectors(self, X: sp.csr_array, nid: int, m: int,
                          start: np.ndarray | None) -> np.ndarray:
        """Up to m top eigenvectors (columns) of Xᵀ X [− diag(Xᵀ 1)] for rows X whose every
        column is held: dense ``eigh`` for few columns, an SVD for few rows, else warm block
        Krylov steps."""
        n, d = X.shape
        if m == 0:
            return np.zeros((d, 0))
        colsum = np.asarray(X.sum(axis=0)).ravel()
        correct = self.family == "multinomial"
        try:
            if d <= 400:
                G = (X.T @ X).toarray()
                if correct:
                    G[np.diag_indices_from(G)] -= colsum
                if m >= d - 1:
                    return top_eigenpairs(G, m)[1]
                return top_eigenpairs(G, m, random_state=self.seed(nid))[1]
            if n < SPARSE_BASIS_MIN_ROWS * m:
                return np.linalg.svd(X.toarray(), full_matrices=False)[2][:m].T

            matvec = gram_operator(X, np.ones(n), colsum if correct else None, 1.0)
            # A starting basis only: T is filled from these same rows for any P, and the
            # child's first refit rebases if its top eigenspace is elsewhere (design §3).
            return self.warm_krylov(matvec, d, m, start, nid, CHILD_BASIS_ITER)[1][:, :m]
        except (spla.ArpackNoConvergence, spla.ArpackError, np.linalg.LinAlgError):
            return np.linalg.svd(X.toarray(), full_matrices=False)[2][:m].T

    def warm_krylov(
        self, matmul: Matmul, d: int, p: int, start: np.ndarray | None, nid: int, max_iter: int
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """:func:`block_krylov_top` for the top 2 of p from ``start`` (padded to p columns with
        a seeded complement; a seeded random block when None)."""
        V0 = np.zeros((d, 0)) if start is None else start[:, :p]
        return block_krylov_top(matmul, complete_basis(V0, p, d, self.seed(nid, 3)),
                                k=min(2, p), tol=EIG_TOL, max_iter=max_iter)

    def rows_top_eigenpairs(
        self, X: sp.csr_array, w: np.ndarray, shift: np.ndarray | None, scale: float, p: int,
        start: np.ndarray | None, nid: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-p eigenpairs of (Xᵀ diag(w) X − diag(shift)) / scale, a node's M2 from the
        weighted rows that hold its C (:mod:`streammom.rowgram`; ``shift`` the column sums
        for the single-topic estimator, None for raw moments), by :meth:`top_eigenpairs`
        on the columns the rows hold (:mod:`streammom.held_columns`): O(nnz · p) a product
        and dense steps in the held columns, not d. The eigenvectors are scattered back to
        R^d; those of a positive eigenvalue are the full operator's (it is zero, or −shift
        on its diagonal, elsewhere). Fewer held columns than p: the solve runs in R^d."""
        d = X.shape[1]
        held, cols = held_columns(X)
        if cols.size < p:
            held, cols = X, np.arange(d)
        dc = cols.size
        matmul = gram_operator(held, w, None if shift is None else shift[cols], scale)
        vals, vecs = self.top_eigenpairs(matmul, dc, p, None if start is None else start[cols],
                                         nid)
        return vals, vecs if dc == d else scatter_rows(vecs, cols, d)

    def top_eigenpairs(
        self, matmul: Matmul, d: int, p: int, start: np.ndarray | None, nid: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-p eigenpairs of a symmetric operator, warm-started from the node's basis.

        Small d: dense ``eigh``. Otherwise block Krylov–Rayleigh–Ritz on [V, AV] from the
        tracked basis (top-m eigenvectors of the last refit), so a refit costs a few products
        with C instead of a cold Lanczos run; ARPACK is the fallback if it does not converge.
        """
        if d <= max(64, 4 * p):
            M = matmul(np.eye(d))
            vals, vecs = np.linalg.eigh((M + M.T) / 2.0)
            return vals[::-1][:p].copy(), np.ascontiguousarray(vecs[:, ::-1][:, :p])
        vals, vecs, ok = self.warm_krylov(
            matmul, d, p, start, nid, EIG_WARM_ITER if start is not None else EIG_COLD_ITER)
        if ok:
            return vals, vecs
        op = spla.LinearOperator((d, d), matvec=matmul, matmat=matmul, dtype=np.float64)
        return top_eigenpairs(op, p, random_state=self.seed(nid))
