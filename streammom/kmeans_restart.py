"""A third start for the refinement of a short stream: k-means on a spectral embedding.

While a stream is short, the refinement's EM (:mod:`streammom.refine`) sees nearly all of it:
the union of the leaves' reservoirs holds at most :data:`KMEANS_ROWS` rows (and, so that the
cost stays that of a young refit, at most :data:`KMEANS_WORK` non-zeros × components), and
those rows are at least :data:`KMEANS_MIN_SHARE` of the events the tree has learned (they are
the stream, not a sample of it: a first batch of 30,000 events leaves a few thousand
reservoir rows, and that refit skips the start). A batch estimator would search such data
with restarts. So the refinement fits one more start beside the tree's partition and the
flat ASVTD estimate. When that fit's weighted log-likelihood is the largest, it becomes the
leaves' scores, which label the events; the routers, and so the sums and the tree's growth,
keep following the other two (design §5).
The start is the classic one for sparse count data, taken from text clustering (Manning,
Raghavan & Schütze, *Introduction to Information Retrieval*, ch. 16–18):

1. **Rows.** Each row is tf-idf weighted, x_ih · idf_h with idf_h = 1 + log(n / (1 + df_h)),
   and scaled to unit L2 norm.
2. **Embedding.** The rows go onto their top q = min(30, n − 1, d − 1) principal directions
   (a truncated SVD, Z = U_q Σ_q), then each row of Z is scaled to unit norm. Z comes from the
   top q eigenpairs of the n × n Gram matrix G = X̃ X̃ᵀ: up to :data:`DENSE_GRAM_ROWS` rows
   from G itself (LAPACK ``syevr``, O(n³): 0.1–0.3 s at n = 1,024, 22 s at 4,096), above by
   Lanczos on the products v ↦ X̃ (X̃ᵀ v) (ARPACK, a seeded start vector; O(nnz) a product:
   0.13 s at 4,096 ICD-shaped rows). Both are deterministic.
3. **Clusters.** Weighted k-means on Z: greedy k-means++ seeding (Arthur & Vassilvitskii
   2007) from a generator seeded by the engine's ``random_state``, then Lloyd iterations.
   The best of :data:`N_INIT` seedings by inertia is kept. A cluster that empties takes the
   row farthest from its centre.
4. **Mixture.** Each cluster's weighted mean row (Bernoulli) or normalised token counts
   (multinomial) and its share of the weight start the same EM
   (:func:`streammom.mixture.fit_mixture_em`).

Measured on the synthetic code streams of issue #15 at the defaults (BENCHMARKS.md "Short
streams", ``bench/short_streams.py``): streams of 300, 500, 800 and 1,000 events go from
0.66, 0.78, 0.86 and 0.92 × the oracle's ARI (means of six seeds) to 0.73, 0.86, 0.92 and
0.95 ×. Longer streams label by their last refits, which have more rows: they are unchanged.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from streammom.decompose import top_eigenpairs
from streammom.estimators import Family
from streammom.mixture import MixtureEMResult, fit_from_partition, partition_sums

__all__ = ["DENSE_GRAM_ROWS", "EMBEDDING_DIM", "KMEANS_MIN_SHARE", "KMEANS_ROWS", "KMEANS_WORK",
           "N_INIT", "is_short_stream", "kmeans_restart", "kmeans_starts", "spectral_embedding",
           "weighted_kmeans"]

#: The k-means start runs while the refinement's rows are at most this many (four default
#: reservoirs: the 2,000-event ICD phenotype streams' last refit; BENCHMARKS.md "Short-stream
#: searches up to 4,096 rows") …
KMEANS_ROWS = 4_096
#: … and their non-zeros × components at most this (its EM is O(nnz · k) a pass: ≲ 0.2 s for
#: 100 passes; 1,024 rows of 10 codes and 16 leaves are 164k, the wide genotype counts of
#: ``bench/wide_counts.py``, 1,000 rows of 1,100 non-zeros, 17.6M).
KMEANS_WORK = 1 << 21
#: … and the rows are at least this share of the events learned (the stream, not a sample).
KMEANS_MIN_SHARE = 0.5
#: Principal directions kept in the embedding (at most; fewer for smaller data).
EMBEDDING_DIM = 30
#: Rows up to which the embedding's eigenpairs come from the dense n × n Gram matrix; above,
#: by Lanczos on its products (at 4,096 ICD-shaped rows 0.13 s instead of 22 s; the top 30
#: directions of a dense spectrum differ a little between the two, the k-means on them as
#: good: :func:`_top_gram_eigenpairs`).
DENSE_GRAM_ROWS = 1_024
#: Relative accuracy of the Lanczos eigenvalues (ARPACK ``tol``): a start, not a result.
LANCZOS_TOL = 1e-6
#: k-means++ seedings tried; the one of least inertia is kept.
N_INIT = 10
_LLOYD_ITER = 100


def spectral_embedding(rows: sp.csr_array, q: int = EMBEDDING_DIM) -> np.ndarray:
    """(n, q') unit rows of the tf-idf rows' top q' = min(q, n − 1, d − 1) principal
    directions (module docstring, steps 1–2). Rows without any token embed to 0.

    >>> X = sp.csr_array(np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1.]]))
    >>> Z = spectral_embedding(X, 2)
    >>> Z.shape, bool(np.allclose(Z[0], Z[1])), round(float(abs(Z[0] @ Z[2])), 6)
    ((3, 2), True, 0.0)
    """
    n, d = rows.shape
    q = min(q, n - 1, d - 1)
    if q < 1:
        return np.zeros((n, 0))
    df = np.bincount(rows.indices, minlength=d)
    idf = 1.0 + np.log(n / (1.0 + df))
    weighted = sp.csr_array(rows @ sp.diags_array(idf))
    norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1)).ravel())
    weighted = sp.csr_array(sp.diags_array(1.0 / np.where(norms > 0, norms, 1.0)) @ weighted)
    values, vectors = _top_gram_eigenpairs(weighted, q)
    Z = vectors * np.sqrt(np.maximum(values, 0.0))
    lengths = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.where(lengths > 0, lengths, 1.0)


def _top_gram_eigenpairs(weighted: sp.csr_array, q: int) -> tuple[np.ndarray, np.ndarray]:
    """The top q eigenpairs of G = W Wᵀ (n × n), largest first: (q,), (n, q). Up to
    :data:`DENSE_GRAM_ROWS` rows from G itself (LAPACK ``syevr``, O(n³)); above, by Lanczos
    (:func:`streammom.decompose.top_eigenpairs` on the products v ↦ W (Wᵀ v), O(nnz) each) from
    a start vector seeded by the shape, so the result is deterministic. Pairs that did not
    converge are dropped."""
    n = weighted.shape[0]
    if n <= DENSE_GRAM_ROWS:
        gram = np.asarray((weighted @ weighted.T).toarray())
        values, vectors = scipy.linalg.eigh(gram, subset_by_index=(n - q, n - 1), driver="evr")
        return values[::-1], vectors[:, ::-1]
    transposed = sp.csr_array(weighted.T)
    gram = spla.LinearOperator((n, n), matvec=lambda v: weighted @ (transposed @ v),
                               dtype=float)
    start = np.random.default_rng([n, weighted.shape[1], q]).standard_normal(n)
    try:
        return top_eigenpairs(gram, q, tol=LANCZOS_TOL, v0=start)
    except spla.ArpackNoConvergence as e:
        order = np.argsort(e.eigenvalues)[::-1]
        return e.eigenvalues[order], e.eigenvectors[:, order]


def weighted_kmeans(Z: np.ndarray, k: int, weight: np.ndarray, seed: int,
                    n_init: int = N_INIT) -> np.ndarray:
    """Cluster of every row of ``Z``: weighted k-means, best of ``n_init`` k-means++
    seedings by inertia Σ_i w_i ‖z_i − c_{l_i}‖² (module docstring, step 3). Deterministic for
    a given ``seed``; k ≤ n.

    >>> Z = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> weighted_kmeans(Z, 2, np.ones(4), seed=0).tolist() in ([0, 0, 1, 1], [1, 1, 0, 0])
    True
    """
    n = Z.shape[0]
    rng = np.random.default_rng([seed, n, k])
    best: tuple[float, np.ndarray] | None = None
    for _ in range(n_init):
        label, inertia = _lloyd(Z, _plus_plus(Z, k, weight, rng), weight)
        if best is None or inertia < best[0]:
            best = (inertia, label)
    assert best is not None
    return best[1]


def _plus_plus(Z: np.ndarray, k: int, weight: np.ndarray, rng: np.random.Generator
               ) -> np.ndarray:
    """Greedy k-means++: the first centre drawn by weight; for each next one, 2 + ⌊ln k⌋
    candidates drawn by weight × squared distance to the nearest centre so far, and the one
    that leaves the least potential Σ_i w_i D_i² kept (Arthur & Vassilvitskii 2007, §6)."""
    n = Z.shape[0]
    trials = 2 + int(np.log(k))
    centres = np.empty((k, Z.shape[1]))
    centres[0] = Z[rng.choice(n, p=weight / weight.sum())]
    nearest = ((Z - centres[0]) ** 2).sum(axis=1)
    for j in range(1, k):
        p = weight * nearest
        total = p.sum()
        picks = (rng.choice(n, size=trials, p=p / total) if total > 0
                 else rng.integers(n, size=trials))
        candidates = np.minimum(nearest[None, :],
                                ((Z[None, :, :] - Z[picks][:, None, :]) ** 2).sum(axis=2))
        best = int(np.argmin(candidates @ weight))
        centres[j] = Z[picks[best]]
        nearest = candidates[best]
    return centres


def _sq_distances(Z: np.ndarray, sq_norms: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """(n, k) squared distances ‖z_i − c_j‖² = ‖z_i‖² − 2 z_i·c_j + ‖c_j‖² (one product)."""
    dist = sq_norms[:, None] - 2.0 * (Z @ centres.T) + (centres**2).sum(axis=1)[None, :]
    return np.maximum(dist, 0.0)


def _lloyd(Z: np.ndarray, centres: np.ndarray, weight: np.ndarray
           ) -> tuple[np.ndarray, float]:
    """Lloyd iterations from ``centres`` until the assignment stops changing."""
    n, k = Z.shape[0], centres.shape[0]
    sq_norms = (Z**2).sum(axis=1)
    label = np.full(n, -1)
    dist = _sq_distances(Z, sq_norms, centres)
    for _ in range(_LLOYD_ITER):
        new = np.argmin(dist, axis=1)
        if np.array_equal(new, label):
            break
        label = new
        mass = np.bincount(label, weights=weight, minlength=k)
        for j in np.flatnonzero(mass <= 0):  # an empty cluster takes the worst-fitted row
            far = int(np.argmax(dist[np.arange(n), label]))
            label[far] = j
            dist[far] = 0.0
            mass = np.bincount(label, weights=weight, minlength=k)
        centres = partition_sums(Z, weight, label, k)[0] / mass[:, None]
        dist = _sq_distances(Z, sq_norms, centres)
    inertia = float(weight @ dist[np.arange(n), label])
    return label, inertia


def is_short_stream(rows: sp.csr_array, k: int, n_events: int | None) -> bool:
    """Whether the refinement's ``rows`` are a short stream's (module docstring): at most
    :data:`KMEANS_ROWS` rows, non-zeros × ``k`` at most :data:`KMEANS_WORK`, and at least
    :data:`KMEANS_MIN_SHARE` of ``n_events``, the events learned (None: no such bound).
    The refinement's searches that cost more than a long stream's refits run only then."""
    n = rows.shape[0]
    return (n <= KMEANS_ROWS and rows.nnz * k <= KMEANS_WORK
            and (n_events is None or n >= KMEANS_MIN_SHARE * n_events))


def kmeans_restart(rows: sp.csr_array, row_weight: np.ndarray, k: int, family: Family, *,
                   max_iter: int, tol: float, random_state: int, n_events: int | None = None
                   ) -> MixtureEMResult | None:
    """The refinement's k-means start (module docstring) and its EM; None when the rows are too
    many for it (more than :data:`KMEANS_ROWS`, or non-zeros × k above :data:`KMEANS_WORK`),
    a sample of a longer stream (fewer than :data:`KMEANS_MIN_SHARE` × ``n_events``, the events
    learned, when given), or do not support it (fewer rows than k, an embedding of fewer than
    one dimension)."""
    if not is_short_stream(rows, k, n_events):
        return None
    fits = kmeans_starts(rows, row_weight, k, family, max_iter=max_iter, tol=tol,
                         seeds=[random_state])
    return fits[0] if fits else None


def kmeans_starts(rows: sp.csr_array, row_weight: np.ndarray, k: int, family: Family, *,
                  max_iter: int, tol: float, seeds: list[int]) -> list[MixtureEMResult]:
    """:func:`kmeans_restart`'s start and EM once for each of ``seeds``, on one embedding of
    the rows (computed once): the fits in the seeds' order, none where the rows do not
    support the start (fewer rows than k, an embedding of no dimension). The caller bounds
    the rows (:func:`is_short_stream`)."""
    if k < 2 or k > rows.shape[0] or not seeds:
        return []
    Z = spectral_embedding(rows)
    if Z.shape[1] == 0:
        return []
    return [fit_from_partition(rows, row_weight, weighted_kmeans(Z, k, row_weight, seed), k,
                               family=family, max_iter=max_iter, tol=tol) for seed in seeds]
