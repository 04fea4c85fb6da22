"""Relevance-ranked features (Sievert & Shirley, LDAvis, 2014), as used to label clusters.

r(w, c) = λ·log p(w | c) + (1 − λ)·log( p(w | c) / p(w) ), λ = 0.7 by default (thesis eq. 3.8
and eq. 4.12; *Hierarchical Methods of Moments* §4.2). For Bernoulli clusters p(w | c) is the
prevalence μ_{c,w} and p(w) the overall prevalence; for multinomial clusters both are word
distributions (normalised to sum 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streammom.family import Family, check_family

__all__ = ["FeatureScore", "relevance", "top_features"]

_EPS = 1e-12


@dataclass(frozen=True, repr=False)
class FeatureScore:
    """One ranked feature: index, name, relevance, probability in the cluster and overall.

    >>> FeatureScore(3, "E11.9", -0.3412, 0.52, 0.11)
    FeatureScore('E11.9', relevance=-0.341, p=0.52, background=0.11)
    """

    index: int
    name: str
    relevance: float
    probability: float
    background: float

    def __repr__(self) -> str:
        return (f"FeatureScore({self.name!r}, relevance={self.relevance:.3g}, "
                f"p={self.probability:.3g}, background={self.background:.3g})")

    @property
    def lift(self) -> float:
        """p(w | c) / p(w)."""
        return self.probability / max(self.background, _EPS)


def _as_probabilities(mean: np.ndarray, family: str) -> np.ndarray:
    p = np.clip(np.asarray(mean, dtype=float).ravel(), 0.0, None)
    if family == "multinomial":
        total = p.sum()
        return p / total if total > 0 else p
    check_family(family)
    return np.clip(p, 0.0, 1.0)


def relevance(p_cluster: np.ndarray, p_background: np.ndarray, lam: float = 0.7) -> np.ndarray:
    """Element-wise relevance λ log p + (1 − λ) log(p / p_bg); −inf where p = 0.

    >>> relevance(np.array([0.5, 0.5]), np.array([0.5, 0.25]), lam=0.0).round(3).tolist()
    [0.0, 0.693]
    """
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    p = np.asarray(p_cluster, dtype=float)
    bg = np.maximum(np.asarray(p_background, dtype=float), _EPS)
    with np.errstate(divide="ignore"):
        logp = np.where(p > 0, np.log(np.maximum(p, _EPS)), -np.inf)
    return lam * logp + (1.0 - lam) * (logp - np.log(bg))


def top_features(
    cluster_mean: np.ndarray,
    background_mean: np.ndarray,
    *,
    n: int = 10,
    lam: float = 0.7,
    family: Family = "bernoulli",
    feature_names: Sequence[str] | None = None,
) -> list[FeatureScore]:
    """The ``n`` most relevant features of a cluster (node or mixture component).

    ``cluster_mean`` is the cluster's mean vector (prevalences for binary data, expected counts
    or a topic for count data) and ``background_mean`` the same for all data (the root's mean,
    or M1). Features absent from the cluster are never returned. Ties break by feature index.

    >>> [f.name for f in top_features(np.array([0.9, 0.1, 0.5]), np.array([0.3, 0.3, 0.5]),
    ...                               n=2, feature_names=["a", "b", "c"])]
    ['a', 'c']
    """
    p = _as_probabilities(cluster_mean, family)
    bg = _as_probabilities(background_mean, family)
    if p.shape != bg.shape:
        raise ValueError(f"cluster and background means differ in shape: {p.shape} vs {bg.shape}")
    if feature_names is not None and len(feature_names) != p.size:
        raise ValueError(f"{len(feature_names)} feature names for {p.size} features")
    r = relevance(p, bg, lam)
    present = np.flatnonzero(p > 0)
    order = present[np.lexsort((present, -r[present]))][: max(n, 0)]
    return [
        FeatureScore(
            index=int(i),
            name=str(feature_names[i]) if feature_names is not None else str(int(i)),
            relevance=float(r[i]),
            probability=float(p[i]),
            background=float(bg[i]),
        )
        for i in order
    ]
