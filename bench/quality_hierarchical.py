"""Hierarchical SIDIWO / D-SIDIWO: the paper's 8-topic experiment and a large sparse fit.

1. **B6** (thesis §5.4.1, Table 5.1; *Hierarchical Methods of Moments* §4.1): 8 topics over 100
   words (block matrix 0.7/0.1 + U[0, 0.1) noise, columns normalised; the reference script's
   pandas quirk leaves d = 99), ω ~ U(0, 1)^8 normalised, 400 documents of 200 words, 10 seeds.
   Depth 3 (8 leaves). Methods, all in this process on the same data:

   * ``sidiwo`` — ``HierarchicalMoM(3, method="sidiwo", family="multinomial")`` (paper:
     ARI 0.98 ± 0.01, 0.4 s on a 2016 laptop in Python 2.7);
   * ``dsidiwo`` — the same tree with D-SIDIWO splits;
   * ``sidiwo+em`` — SIDIWO with a 2-component EM per split;
   * ``kmeans`` — scikit-learn ``KMeans(8, n_init=10)`` on the count matrix;
   * ``bisecting-kmeans`` — scikit-learn ``BisectingKMeans(8)`` on the count matrix.

   Acceptance: mean leaf ARI of ``sidiwo`` ≥ 0.95 over the 10 seeds, under 0.1 s per fit.

2. **Large sparse fit**: ``HierarchicalMoM(max_depth=4)`` (D-SIDIWO, Bernoulli) on 50,000 ×
   2,000 binary rows with ~10 ones each (:func:`streammom.datasets.make_sparse_binary`).
   Wall time of ``fit`` (best of 3, one thread); memory measured in a fresh child process:
   the process's peak RSS (``ru_maxrss``, everything: interpreter, numpy, data, fit), the RSS
   high-water-mark increase during ``fit``, and the ``tracemalloc`` peak during ``fit`` (Python
   and numpy allocations; a separate run, because tracing slows the fit).
   Acceptance: < 10 s and peak < 2 GB.

Run: ``.venv/bin/python bench/quality_hierarchical.py`` (or ``-m bench.quality_hierarchical``).
Thread pools are pinned to one thread before numpy loads (when this module is the entry point).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.cluster import BisectingKMeans, KMeans  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

from streammom.datasets import make_block_topics, make_sparse_binary  # noqa: E402
from streammom.hierarchical import HierarchicalMoM  # noqa: E402

__all__ = ["main", "run", "run_b6", "run_large", "summarise"]

_MB = 1024.0 * 1024.0
ARI_TARGET = 0.95
FIT_TIME_TARGET_S = 0.1
LARGE_TIME_TARGET_S = 10.0
LARGE_MEMORY_TARGET_MB = 2048.0


def _b6_methods(seed: int) -> dict[str, Callable[[sp.csr_array], np.ndarray]]:
    def moments(**params: Any) -> Callable[[sp.csr_array], np.ndarray]:
        def fit(X: sp.csr_array) -> np.ndarray:
            return HierarchicalMoM(max_depth=3, family="multinomial", **params).fit(X).labels_

        return fit

    def kmeans(X: sp.csr_array) -> np.ndarray:
        return KMeans(n_clusters=8, n_init=10, random_state=seed).fit_predict(X)

    def bisecting(X: sp.csr_array) -> np.ndarray:
        return BisectingKMeans(n_clusters=8, random_state=seed).fit_predict(X)

    return {
        "sidiwo": moments(method="sidiwo"),
        "dsidiwo": moments(method="dsidiwo"),
        "sidiwo+em": moments(method="sidiwo", em=True),
        "kmeans": kmeans,
        "bisecting-kmeans": bisecting,
    }


def run_b6(
    seeds: Sequence[int] = tuple(range(10)), *, n_docs: int = 400, doc_length: int = 200
) -> list[dict[str, Any]]:
    """One record per (seed, method) of the 8-topic experiment: leaf ARI and fit time."""
    records: list[dict[str, Any]] = []
    for seed in seeds:
        X, labels = make_block_topics(n_docs, doc_length, random_state=int(seed))
        for name, fit in _b6_methods(int(seed)).items():
            t0 = time.perf_counter()
            pred = fit(X)
            elapsed = time.perf_counter() - t0
            records.append({
                "benchmark": "b6_block_topics", "method": name, "seed": int(seed),
                "n": X.shape[0], "d": X.shape[1], "ari": float(adjusted_rand_score(labels, pred)),
                "time_s": elapsed, "n_clusters": int(np.unique(pred).size),
            })
    return records


def _memory_probe(n: int, d: int, max_depth: int, seed: int) -> dict[str, float]:
    """Runs in a fresh child process: RSS high-water marks and tracemalloc peak of one fit."""
    rss_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    X, _ = make_sparse_binary(n, d, 10.0, 8, random_state=seed)
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    est = HierarchicalMoM(max_depth=max_depth)
    est.fit(X)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    tracemalloc.start()
    est.fit(X)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "peak_rss_mb": rss_after,
        "rss_after_imports_mb": rss_imports,
        "rss_after_data_mb": rss_data,
        "tracemalloc_peak_mb": peak / _MB,
        "data_mb": (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / _MB,
    }


def run_large(
    n: int = 50_000, d: int = 2_000, *, max_depth: int = 4, seed: int = 0, repeats: int = 3,
    memory: bool = True,
) -> list[dict[str, Any]]:
    """Fit time (best of ``repeats``) and memory of HierarchicalMoM on n × d sparse binary rows."""
    t0 = time.perf_counter()
    X, labels = make_sparse_binary(n, d, 10.0, 8, random_state=seed)
    gen_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        est = HierarchicalMoM(max_depth=max_depth).fit(X)
        times.append(time.perf_counter() - t0)
    record: dict[str, Any] = {
        "benchmark": "large_sparse_fit", "method": "dsidiwo", "n": n, "d": d,
        "nnz_per_row": X.nnz / n, "max_depth": max_depth, "n_leaves": est.n_leaves_,
        "fit_s": min(times), "fit_s_all": times, "generate_s": gen_s,
        "ari_vs_8_generating_clusters": float(adjusted_rand_score(labels, est.labels_)),
    }
    if memory:
        here = os.path.dirname(os.path.abspath(__file__))
        code = (
            f"import json, sys; sys.path.insert(0, {here!r}); import quality_hierarchical as q; "
            f"print(json.dumps(q._memory_probe({n}, {d}, {max_depth}, {seed})))"
        )
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True, env=dict(os.environ))
        record.update(json.loads(out.stdout.strip().splitlines()[-1]))
    return [record]


def run_generator_timing(n: int = 200_000, d: int = 2_000, seed: int = 0) -> dict[str, Any]:
    """Time of ``make_hierarchical_bernoulli`` at the streaming benchmarks' size."""
    from streammom.datasets import make_hierarchical_bernoulli

    t0 = time.perf_counter()
    X, _, _ = make_hierarchical_bernoulli(n, d, 8, random_state=seed)
    return {"benchmark": "generator", "n": n, "d": d, "time_s": time.perf_counter() - t0,
            "nnz_per_row": X.nnz / n}


def run(
    seeds: Sequence[int] = tuple(range(10)), *, large: bool = True, memory: bool = True
) -> list[dict[str, Any]]:
    """All records: the B6 experiment per (seed, method), then the large sparse fit."""
    records = run_b6(seeds)
    if large:
        records += run_large(memory=memory)
        records.append(run_generator_timing())
    return records


def summarise(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± sd leaf ARI and mean fit time per B6 method (order of first appearance)."""
    b6 = [r for r in records if r["benchmark"] == "b6_block_topics"]
    out = []
    for name in dict.fromkeys(r["method"] for r in b6):
        rows = [r for r in b6 if r["method"] == name]
        ari = np.array([r["ari"] for r in rows])
        out.append({
            "method": name, "runs": len(rows), "ari_mean": float(ari.mean()),
            "ari_sd": float(ari.std(ddof=1)) if len(rows) > 1 else 0.0,
            "ari_min": float(ari.min()),
            "time_mean_s": float(np.mean([r["time_s"] for r in rows])),
        })
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--no-large", action="store_true", help="skip the 50,000 × 2,000 fit")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory child run")
    args, _ = parser.parse_known_args(argv)
    records = run(args.seeds, large=not args.no_large, memory=not args.no_memory)
    summary = summarise(records)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "?")
    print(f"B6 — 8-topic hierarchical single-topic corpus: 400 docs × 200 words, d = 99, "
          f"depth 3, seeds {args.seeds}, BLAS threads {threads}")
    print(f"{'method':<17} {'runs':>4} {'leaf ARI mean ± sd':>20} {'min':>7} {'time/fit (s)':>13}")
    for s in summary:
        print(f"{s['method']:<17} {s['runs']:>4} {s['ari_mean']:>10.4f} ± {s['ari_sd']:.4f} "
              f"{s['ari_min']:>7.4f} {s['time_mean_s']:>13.4f}")
    by = {s["method"]: s for s in summary}
    ok = by["sidiwo"]["ari_mean"] >= ARI_TARGET and by["sidiwo"]["time_mean_s"] < FIT_TIME_TARGET_S
    print(f"acceptance (sidiwo mean ARI ≥ {ARI_TARGET}, < {FIT_TIME_TARGET_S} s per fit; "
          f"paper 0.98 ± 0.01): {'PASS' if ok else 'FAIL'}")
    for r in records:
        if r["benchmark"] == "large_sparse_fit":
            print(f"\nHierarchicalMoM(max_depth=4) D-SIDIWO on {r['n']:,} × {r['d']:,} sparse "
                  f"binary ({r['nnz_per_row']:.2f} ones/row): {r['n_leaves']} leaves")
            print(f"  fit time (best of {len(r['fit_s_all'])}): {r['fit_s']:.2f} s  "
                  f"(all: {', '.join(f'{t:.2f}' for t in r['fit_s_all'])})")
            mem_ok = True
            if "peak_rss_mb" in r:
                print(f"  child process peak RSS (ru_maxrss high-water mark, whole process): "
                      f"{r['peak_rss_mb']:.0f} MB (after imports {r['rss_after_imports_mb']:.0f}"
                      f" MB, after generating X {r['rss_after_data_mb']:.0f} MB)")
                print(f"  tracemalloc peak during fit (Python + numpy allocations): "
                      f"{r['tracemalloc_peak_mb']:.0f} MB; X itself: {r['data_mb']:.1f} MB")
                mem_ok = r["peak_rss_mb"] < LARGE_MEMORY_TARGET_MB
            large_ok = r["fit_s"] < LARGE_TIME_TARGET_S and mem_ok
            print(f"  acceptance (< {LARGE_TIME_TARGET_S:.0f} s, peak < 2 GB): "
                  f"{'PASS' if large_ok else 'FAIL'}")
            ok = ok and large_ok
        elif r["benchmark"] == "generator":
            print(f"\nmake_hierarchical_bernoulli({r['n']:,}, {r['d']:,}): {r['time_s']:.2f} s "
                  f"({r['nnz_per_row']:.2f} ones/row)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
