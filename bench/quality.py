"""Quality benchmark: the papers' synthetic experiments, with peers run on the same data.

Runs, in one process:

* the hierarchical single-topic experiment (thesis §5.4.1 / *Hierarchical Methods of Moments*
  §4.1, Table 5.1): 8 topics over 100 words, 400 documents of 200 words, 10 seeds, depth 3 —
  hierarchical SIDIWO and D-SIDIWO vs scikit-learn KMeans and BisectingKMeans;
* the fit of ``HierarchicalMoM(max_depth=4)`` on 50,000 × 2,000 sparse binary rows;
* the Bernoulli-mixture experiment (thesis §4.5): d = 99, k = 12, n = 10,000 —
  ASVTD + EM vs scikit-learn KMeans.

Usage: ``python bench/quality.py`` (one core: thread pools are pinned to 1 before numpy loads).
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import quality_bernoulli  # noqa: E402
import quality_hierarchical  # noqa: E402


def main() -> None:
    print("# streammom quality benchmark\n")
    print(f"command: python {' '.join(sys.argv)}\n")
    quality_hierarchical.main()
    print()
    quality_bernoulli.main()


if __name__ == "__main__":
    main()
