"""The measurement behind ``family="auto"``: on binary data, Bernoulli or multinomial?

    .venv/bin/python bench/family_choice.py

Counts leave no choice (a Bernoulli model rejects them). For every binary set of
``bench/quality_real.py`` (synthetic code streams, digits, DNA, MNIST 5k) the stream at its
defaults — ``max_leaves=k``, one pass in batches of 1,000 — with each family, and
``SpectralMixture`` (ASVTD + EM) with each family; ARI against the labels. One core.
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import warnings  # noqa: E402

from sklearn.metrics import adjusted_rand_score  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offline_sets  # noqa: E402
import quality_real as qs  # noqa: E402

from streammom import SpectralMixture  # noqa: E402
from streammom.estimators import FAMILIES  # noqa: E402


def main() -> None:
    print("# streammom: Bernoulli or multinomial on binary data\n")
    print(f"command: python {' '.join(sys.argv)}\n")
    sets = [qs._synthetic(500, 2), qs._synthetic(3_000, 3), qs._synthetic(20_000, 1),
            qs._digits(), qs._offline(offline_sets.dna), qs._offline(offline_sets.mnist5k)]
    print("| set | stream bernoulli | stream multinomial | SpectralMixture bernoulli | "
          "SpectralMixture multinomial |")
    print("|---|---:|---:|---:|---:|")
    for raw in sets:
        if raw is None:
            continue
        assert raw.family == "bernoulli", f"{raw.name} is not binary"
        s = qs._shuffled(raw)
        cells = []
        for fit in ("stream", "flat"):
            for family in FAMILIES:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if fit == "stream":
                        labels = qs._stream(s, family)
                    else:
                        labels = SpectralMixture(s.k, family=family).fit(s.X).predict(s.X)
                cells.append(f"{adjusted_rand_score(s.y, labels):.3f}")
        print(f"| {s.name} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
