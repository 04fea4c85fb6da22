"""Seeded synthetic data sets with known ground truth (for tests, examples and benchmarks).

Every generator returns ``(X, labels)`` — X a float64 CSR array, labels int64 — plus extra
outputs described per function. All randomness comes from ``numpy.random.default_rng(seed)``,
so the same arguments give the same arrays on every platform with the same numpy.

* :func:`make_hierarchical_bernoulli` — binary tree of latent phenotypes; sparse binary code sets
  (an ICD-like stream). Used by the streaming engine's tests and the timing benchmarks.
* :func:`make_block_topics` — the 8-topic single-topic experiment of *Hierarchical Methods of
  Moments* §4.1 / thesis §5.4.1 (benchmark B6).
* :func:`make_bernoulli_mixture` — the thesis ch. 4 §4.5 reference Bernoulli mixture (B5).
* :func:`make_sparse_binary` — ~``nnz_per_row`` ones per row over ``d`` features, clustered.

Sparse Bernoulli sampling (:func:`sample_bernoulli_csr`) never draws n × d uniforms: features are
binned by prevalence (within a factor 2), the positions of the ones of a bin are drawn exactly
with geometric gaps at the bin's largest prevalence q, then thinned with probability p_f / q.
Each cell is therefore an exact independent Bernoulli(p_f); the cost is O(nnz), not O(n d).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from streammom._validation import check_random_state_int

__all__ = [
    "BernoulliMixtureTruth",
    "HierarchyTruth",
    "TopicTruth",
    "block_topic_matrix",
    "make_bernoulli_mixture",
    "make_block_topics",
    "make_hierarchical_bernoulli",
    "make_sparse_binary",
    "sample_bernoulli_csr",
]


# --------------------------------------------------------------------------- sampling helpers
def _geometric_positions(rng: np.random.Generator, n_cells: int, q: float) -> np.ndarray:
    """Sorted positions of the ones in ``n_cells`` i.i.d. Bernoulli(q) cells (exact).

    Gaps between consecutive successes are Geometric(q) on {1, 2, ...}; draw them in chunks of
    about the expected count plus a safety margin until the cumulative position passes the end.
    """
    if n_cells <= 0 or q <= 0.0:
        return np.zeros(0, dtype=np.int64)
    if q >= 1.0:
        return np.arange(n_cells, dtype=np.int64)
    mean = n_cells * q
    chunks: list[np.ndarray] = []
    last = -1
    m = int(mean + 6.0 * np.sqrt(mean + 1.0) + 16)
    while True:
        pos = last + np.cumsum(rng.geometric(q, size=m))
        if pos[-1] >= n_cells:
            chunks.append(pos[pos < n_cells])
            break
        chunks.append(pos)
        last = int(pos[-1])
        remaining = (n_cells - 1 - last) * q
        m = int(remaining + 6.0 * np.sqrt(remaining + 1.0) + 16)
    return np.concatenate(chunks)


def sample_bernoulli_csr(
    rng: np.random.Generator, n_rows: int, prevalence: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the ones of an (n_rows, d) matrix with X_if ~ Bernoulli(p_f).

    Exact and O(nnz): features are grouped into prevalence bins (p within a factor 2 of the
    bin's maximum q), positions of the ones of each bin drawn with geometric gaps at rate q and
    thinned with probability p_f / q. Returns ``(rows, cols)`` (int64), unsorted.
    """
    p = np.asarray(prevalence, dtype=np.float64)
    if p.ndim != 1 or (p.size and (p.min() < 0 or p.max() > 1 or not np.isfinite(p).all())):
        raise ValueError("prevalence must be a 1-D array of probabilities")
    nz = np.flatnonzero(p > 0)
    if n_rows <= 0 or nz.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    pz = p[nz]
    bins = np.floor(np.log2(pz.max() / pz)).astype(np.int64)
    rows_out: list[np.ndarray] = []
    cols_out: list[np.ndarray] = []
    for b in np.unique(bins):
        cols = nz[bins == b]
        pc = p[cols]
        q = float(pc.max())
        pos = _geometric_positions(rng, n_rows * cols.size, q)
        r, c = np.divmod(pos, cols.size)
        keep = rng.random(pos.size) * q < pc[c]
        rows_out.append(r[keep])
        cols_out.append(cols[c[keep]])
    return np.concatenate(rows_out), np.concatenate(cols_out)


def _sample_mixture_csr(
    rng: np.random.Generator, labels: np.ndarray, prevalence: np.ndarray
) -> sp.csr_array:
    """Binary CSR with X_if ~ Bernoulli(prevalence[labels[i], f]), one sampler call per class."""
    n = labels.shape[0]
    k, d = prevalence.shape
    rows_out: list[np.ndarray] = []
    cols_out: list[np.ndarray] = []
    for j in range(k):
        idx = np.flatnonzero(labels == j)
        r, c = sample_bernoulli_csr(rng, idx.size, prevalence[j])
        rows_out.append(idx[r])
        cols_out.append(c)
    # 32-bit indices where they fit (scipy's own choice), so scikit-learn accepts the matrix
    index_dtype = np.int32 if max(n, d) < np.iinfo(np.int32).max else np.int64
    rows = np.concatenate(rows_out).astype(index_dtype)
    cols = np.concatenate(cols_out).astype(index_dtype)
    X = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(n, d), dtype=np.float64)
    X.sort_indices()
    return X


def _draw_labels(rng: np.random.Generator, n: int, weights: np.ndarray) -> np.ndarray:
    return rng.choice(weights.size, size=n, p=weights).astype(np.int64)


def _check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------- hierarchical
@dataclass(frozen=True)
class HierarchyTruth:
    """Ground truth of :func:`make_hierarchical_bernoulli`.

    Tree nodes are numbered in heap (BFS) order: root 0, children of node v are 2v+1, 2v+2;
    leaf j (0-based, left to right) is node ``n_leaves - 1 + j``.

    ``prevalence`` (n_leaves, d): P(x_f = 1 | leaf); ``leaf_weights`` (n_leaves,);
    ``blocks[v]``: feature indices of node v's signature block; ``node_of_feature`` (d,): the
    node owning each feature (−1 for background features); ``depth`` = number of split levels.
    """

    prevalence: np.ndarray
    leaf_weights: np.ndarray
    blocks: tuple[np.ndarray, ...]
    node_of_feature: np.ndarray
    depth: int


def make_hierarchical_bernoulli(
    n_samples: int,
    n_features: int,
    n_leaves: int = 8,
    *,
    codes_per_event: float = 10.0,
    block_size: int | None = None,
    signal: float = 0.8,
    leaf_weights: np.ndarray | None = None,
    random_state: int = 0,
    return_truth: bool = False,
) -> (
    tuple[sp.csr_array, np.ndarray, np.ndarray]
    | tuple[sp.csr_array, np.ndarray, np.ndarray, HierarchyTruth]
):
    """Sparse binary events from a balanced binary tree of latent phenotypes.

    Model (a hierarchical Bernoulli naive-Bayes mixture, thesis ch. 4 §4.1 with tree-structured
    centres): the tree has depth L = log2(n_leaves) split levels; every node v (root included)
    owns a block of ``block_size`` "signature" features. An event of leaf j has each feature f
    independently with probability

    * p_f ≈ ``p_hi`` (jittered per feature, U(0.5, 1.5)·p_hi) if f is in the block of one of the
      L + 1 nodes on the root→j path,
    * a small background prevalence b_f otherwise (log-normal, σ = 1: a few common codes, a long
      tail of rare ones; capped at p_hi / 4, below every signature rate).

    ``p_hi`` and the scale of b are chosen so that an event has ``codes_per_event`` ones on
    average, a fraction ``signal`` of them from signature blocks. Two sibling leaves differ only
    by their own blocks (about ``signal · codes / (L + 1)`` expected ones each); two halves of the
    tree differ by every block below the root, so upper splits are easier than the last ones.
    With the defaults (10 codes, blocks of 10, signal 0.8: p_hi = 0.2) a Bayes-optimal
    classifier with the true parameters reaches leaf ARI ≈ 0.9.

    Leaf weights default to U(0.5, 1.5) draws, normalised (mildly unbalanced).

    Returns ``(X, labels, level_labels)`` — X (n, d) CSR float64 of 0/1, labels (n,) int64 leaf
    index 0..n_leaves−1, level_labels (n, L) int64 whose column ℓ is the index (0..2^(ℓ+1)−1,
    left to right) of the ancestor at depth ℓ + 1; the last column equals ``labels``. With
    ``return_truth=True`` a :class:`HierarchyTruth` is appended.

    Cost O(nnz): 200,000 × 2,000 with 10 codes per row takes well under a second.
    """
    n = _check_positive_int(n_samples, "n_samples")
    d = _check_positive_int(n_features, "n_features", 2)
    k = _check_positive_int(n_leaves, "n_leaves", 2)
    if k & (k - 1):
        raise ValueError(f"n_leaves must be a power of 2, got {k}")
    seed = check_random_state_int(random_state)
    if not 0.0 < signal < 1.0:
        raise ValueError(f"signal must be in (0, 1), got {signal}")
    if codes_per_event <= 0:
        raise ValueError("codes_per_event must be positive")
    L = k.bit_length() - 1
    n_nodes = 2 * k - 1
    if block_size is None:
        block_size = max(1, min(10, (d // 2) // n_nodes))
    b = _check_positive_int(block_size, "block_size")
    n_sig = n_nodes * b
    on_path = (L + 1) * b
    if n_sig >= d:
        raise ValueError(
            f"{n_nodes} signature blocks of {b} features need more than n_features={d}"
        )
    p_hi = signal * codes_per_event / on_path
    if p_hi * 1.5 > 0.95:
        raise ValueError(
            f"codes_per_event={codes_per_event} with blocks of {b} features needs signature "
            f"prevalence {p_hi:.2f}; increase block_size/n_features or lower signal"
        )
    rng = np.random.default_rng(seed)
    if leaf_weights is None:
        omega = rng.uniform(0.5, 1.5, size=k)
    else:
        omega = np.asarray(leaf_weights, dtype=np.float64)
        if omega.shape != (k,) or (omega < 0).any() or omega.sum() <= 0:
            raise ValueError("leaf_weights must be n_leaves non-negative numbers")
    omega = omega / omega.sum()

    node_of_feature = np.full(d, -1, dtype=np.int64)
    node_of_feature[:n_sig] = np.repeat(np.arange(n_nodes), b)
    blocks = tuple(np.arange(v * b, (v + 1) * b) for v in range(n_nodes))
    sig_p = np.minimum(p_hi * rng.uniform(0.5, 1.5, size=n_sig), 0.95)
    background = rng.lognormal(0.0, 1.0, size=d)
    # Off-path features of a leaf: all background features plus the other nodes' blocks.
    # Scale b so that Σ_f b_f over a typical leaf's off-path features = (1 − signal)·codes.
    off_mean_count = (d - n_sig) + (n_sig - on_path)
    background *= (1.0 - signal) * codes_per_event / (background.mean() * off_mean_count)
    background = np.minimum(background, p_hi / 4.0)  # strictly below every signature rate

    prevalence = np.tile(background, (k, 1))
    for j in range(k):
        v = k - 1 + j
        while True:
            prevalence[j, blocks[v]] = sig_p[blocks[v]]
            if v == 0:
                break
            v = (v - 1) // 2

    labels = _draw_labels(rng, n, omega)
    X = _sample_mixture_csr(rng, labels, prevalence)
    level_labels = np.column_stack([labels >> (L - lev) for lev in range(1, L + 1)]).astype(
        np.int64
    )
    if return_truth:
        truth = HierarchyTruth(prevalence, omega, blocks, node_of_feature, L)
        return X, labels, level_labels, truth
    return X, labels, level_labels


def make_sparse_binary(
    n_samples: int,
    n_features: int,
    nnz_per_row: float = 10.0,
    n_clusters: int = 8,
    random_state: int = 0,
) -> tuple[sp.csr_array, np.ndarray]:
    """Sparse binary rows with about ``nnz_per_row`` ones each, from ``n_clusters`` clusters.

    A thin wrapper of :func:`make_hierarchical_bernoulli` (``n_clusters`` must be a power of 2),
    for timing runs such as 50,000 × 2,000 with ~10 ones per row. Returns ``(X, labels)``.
    """
    X, labels, _ = make_hierarchical_bernoulli(
        n_samples, n_features, n_clusters, codes_per_event=nnz_per_row, random_state=random_state
    )
    return X, labels


# --------------------------------------------------------------------------- block topics
#: Row blocks of the 100 × 8 topic matrix (``data/M.csv`` of the public code of *Hierarchical
#: Methods of Moments*): (number of rows, topics at 0.7, 1-based). Thesis digest part 2 §4.
_BLOCK_TOPIC_ROWS: tuple[tuple[int, tuple[int, ...]], ...] = (
    (13, (1, 2, 3, 4)),
    (13, (1, 3)),
    (13, (1, 2)),
    (11, (3, 4)),
    (13, (5, 6, 7, 8)),
    (13, (5, 7)),
    (13, (5, 6)),
    (11, (7, 8)),
)


def block_topic_matrix(high: float = 0.7, low: float = 0.1) -> np.ndarray:
    """The noiseless 100 × 8 block matrix of the 8-topic experiment (entries ``high``/``low``)."""
    rows = []
    for count, topics in _BLOCK_TOPIC_ROWS:
        row = np.full(8, low)
        row[[t - 1 for t in topics]] = high
        rows.extend([row] * count)
    return np.array(rows)


@dataclass(frozen=True)
class TopicTruth:
    """Ground truth of :func:`make_block_topics`: topics ``M`` (d, k), columns sum 1; ``omega``."""

    M: np.ndarray
    omega: np.ndarray


def make_block_topics(
    n_docs: int = 400,
    doc_length: int = 200,
    *,
    drop_first_row: bool = True,
    noise: float = 0.1,
    random_state: int = 0,
    return_truth: bool = False,
) -> tuple[sp.csr_array, np.ndarray] | tuple[sp.csr_array, np.ndarray, TopicTruth]:
    """The synthetic hierarchical single-topic corpus (thesis §5.4.1; paper §4.1; B6).

    M = the 100 × 8 block matrix of 0.7/0.1 (:func:`block_topic_matrix`; intended tree
    {1–4} | {5–8}, then {1,2} | {3,4} and {5,6} | {7,8}), plus U[0, ``noise``) noise per entry,
    columns normalised to sum 1. ω ~ U(0, 1)^8, normalised. Each document draws a topic from ω,
    then ``doc_length`` words i.i.d. from that topic (one multinomial draw).

    ``drop_first_row=True`` reproduces the reference script, whose pandas ``read_csv`` takes the
    first row of M.csv as a header: the vocabulary is then 99 words.

    Returns ``(X, labels)`` with X (n_docs, d) CSR of word counts; with ``return_truth=True``
    also a :class:`TopicTruth`.
    """
    n = _check_positive_int(n_docs, "n_docs")
    t = _check_positive_int(doc_length, "doc_length")
    seed = check_random_state_int(random_state)
    if noise < 0:
        raise ValueError("noise must be non-negative")
    rng = np.random.default_rng(seed)
    M = block_topic_matrix()
    if drop_first_row:
        M = M[1:]
    M = M + rng.uniform(0.0, noise, size=M.shape) if noise > 0 else M.copy()
    M = M / M.sum(axis=0, keepdims=True)
    omega = rng.uniform(0.0, 1.0, size=M.shape[1])
    omega = omega / omega.sum()
    labels = _draw_labels(rng, n, omega)
    counts = rng.multinomial(t, M.T[labels])
    X = sp.csr_array(counts.astype(np.float64))
    if return_truth:
        return X, labels, TopicTruth(M, omega)
    return X, labels


# --------------------------------------------------------------------------- Bernoulli mixture
@dataclass(frozen=True)
class BernoulliMixtureTruth:
    """Ground truth of :func:`make_bernoulli_mixture`: centres ``M`` (d, k) and ``omega``."""

    M: np.ndarray
    omega: np.ndarray


def make_bernoulli_mixture(
    n_samples: int,
    n_features: int,
    n_clusters: int,
    *,
    random_state: int = 0,
    return_truth: bool = False,
) -> tuple[sp.csr_array, np.ndarray] | tuple[sp.csr_array, np.ndarray, BernoulliMixtureTruth]:
    """The reference mixture of independent Bernoullis of thesis ch. 4 §4.5 (benchmark B5).

    M ~ Exponential(scale = 10), shape (d, k), then M ← M / (1 + max M) (entries in [0, 1));
    ω ~ U(0, 1)^k normalised; y ~ ω; X_ih ~ Bernoulli(M[h, y_i]).

    Returns ``(X, labels)``; with ``return_truth=True`` also a :class:`BernoulliMixtureTruth`.
    """
    n = _check_positive_int(n_samples, "n_samples")
    d = _check_positive_int(n_features, "n_features")
    k = _check_positive_int(n_clusters, "n_clusters")
    seed = check_random_state_int(random_state)
    rng = np.random.default_rng(seed)
    M = rng.exponential(scale=10.0, size=(d, k))
    M = M / (1.0 + M.max())
    omega = rng.uniform(0.0, 1.0, size=k)
    omega = omega / omega.sum()
    labels = _draw_labels(rng, n, omega)
    X = _sample_mixture_csr(rng, labels, M.T)
    if return_truth:
        return X, labels, BernoulliMixtureTruth(M, omega)
    return X, labels
