"""The papers' synthetic experiments at their acceptance levels (quality, not timings).

The same experiments, with timings and peers, are printed by ``bench/quality.py``.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from streammom import HierarchicalMoM, SpectralMixture
from streammom.datasets import make_bernoulli_mixture, make_block_topics


def test_hierarchical_sidiwo_on_the_eight_topic_corpus_over_ten_seeds() -> None:
    """Thesis §5.4.1 / *Hierarchical Methods of Moments* §4.1: 8 topics, 100 words, 400 docs of
    200 words, depth 3, 10 seeds; the paper reports leaf ARI 0.98 ± 0.01. Acceptance: ≥ 0.95."""
    scores = []
    for seed in range(10):
        X, y = make_block_topics(n_docs=400, doc_length=200, random_state=seed)
        est = HierarchicalMoM(max_depth=3, method="sidiwo", family="multinomial").fit(X)
        scores.append(adjusted_rand_score(y, est.labels_))
    assert np.mean(scores) >= 0.95, scores


def test_asvtd_em_on_the_thesis_bernoulli_mixture_beats_kmeans() -> None:
    """Thesis §4.5: d = 99, k = 12, n = 10,000. Acceptance: ASVTD + EM mean ARI ≥ 0.90 and at
    least KMeans's ARI on the same data."""
    ours, theirs = [], []
    for seed in range(3):
        X, y = make_bernoulli_mixture(10_000, 99, 12, random_state=seed)
        pred = SpectralMixture(12, family="bernoulli", method="asvtd", em=True).fit_predict(X)
        ours.append(adjusted_rand_score(y, pred))
        km = KMeans(n_clusters=12, n_init=10, random_state=seed).fit_predict(X)
        theirs.append(adjusted_rand_score(y, km))
    assert np.mean(ours) >= 0.90, ours
    assert np.mean(ours) >= np.mean(theirs), (ours, theirs)
