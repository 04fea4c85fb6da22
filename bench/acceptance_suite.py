"""Issue #15's synthetic acceptance in one command: every synthetic code-stream family of the
benches, the acceptance protocol on each stream, the stream's ARI over the oracle's.

    .venv/bin/python bench/acceptance_suite.py [--families icd8 shapes ...] [--jobs 2]
        [--limit N] [--out run.jsonl] [--compare earlier.jsonl]

The protocol is the issue's: ``StreamingHierarchy(d, max_leaves=k)`` at its defaults, one pass
in batches of 1,000, then ``predict``. The oracle labels by MAP under the true parameters;
each stream's figure is its ARI over the oracle's, against the 0.9 bar. The generators are
those of the benches that own each family (imported from them, not copied), with the seeds
BENCHMARKS.md's status table reports:

========  ====================================================================  =======
family    streams                                                               count
========  ====================================================================  =======
issue     ``quality_real``'s code streams (d = 500, 8 leaves): 500 … 100,000      5
short     ``short_streams``: 300 / 500 / 800 / 1,000 events, seeds 0–25          104
long      ``long_streams.STREAMS`` (balanced trees, ≤ 16 leaves), seeds 0–3       40
rtree     ``random_tree_streams.STREAMS`` (random trees, 3–20 leaves), seeds 0–3  40
shapes    ``random_shapes``: draws 3 and 4, 14 shapes each                        28
skewed    ``uncovered_shapes``: Dirichlet(0.7) shares, four shapes, seeds 0–3     16
leaves32  ``uncovered_shapes``: 32 leaves, seeds 0–3                               4
codes3    ``uncovered_shapes``: three codes an event, seeds 0–3                    4
icd8      ``icd_phenotype_streams``: 2,000 × 8 phenotypes, seeds 0–15              16
icd16     ``icd_phenotype_streams``: 5,000 × 16, seeds 0–11                        12
icd20k    ``icd_phenotype_streams``: 20,000 × 16, seeds 0–3                         4
many      ``many_leaves.STREAMS`` (32 and 64 leaves, 30,000–200,000 events),      12
          seeds 0–1; not in the default run (about an hour on one core)
phase     ``phase_streams``: its two shapes, seeds 0–1, in its orders but random    16
          (sorted, half sorted, emerging, late); not in the default run (the
          acceptance's order is random; about 25 minutes on two jobs)
========  ====================================================================  =======

``--out`` writes one JSON line a stream (family, case, oracle ARI, ARI, ratio, labels,
seconds); ``--compare`` reads such a file from an earlier run (another commit: run this
script from a ``git worktree`` of it) and lists the streams whose ratio moved, with both
runs' family summaries — the A/B a change to the engine needs before it is kept.
``bench/acceptance_suite.jsonl`` is the last full default run (BENCHMARKS.md "One command for
the synthetic acceptance"); the figures pin floating-point results, so compare against it on
the machine that wrote it, or write a new one from the commit before the change. Streams run
in ``--jobs`` processes, one BLAS thread each (pinned before numpy loads), so the figures do
not depend on the number of jobs.
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from concurrent.futures import ProcessPoolExecutor, as_completed  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.metrics import adjusted_rand_score  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402
from streammom.mixture import map_assign  # noqa: E402

#: The bar of issue #15's synthetic acceptance.
BAR = 0.9
DEFAULT_FAMILIES = ("issue", "short", "long", "rtree", "shapes", "skewed", "leaves32",
                    "codes3", "icd8", "icd16", "icd20k")


@dataclass(frozen=True)
class Case:
    """One stream: its family, a readable name, and the generator's arguments."""

    family: str
    name: str
    args: tuple[Any, ...]
    size: int  # events × leaves: the longest streams are started first


@dataclass(frozen=True)
class Result:
    family: str
    case: str
    oracle_ari: float
    ari: float
    ratio: float
    labels: int
    k: int
    seconds: float


Stream = tuple[sp.csr_array, np.ndarray, np.ndarray, int]  # X, y, oracle labels, k


def _hierarchical(n: int, d: int, k: int, codes: float, seed: int, signal: float | None = None,
                  concentration: float | None = None) -> Stream:
    """The issue's generator (:func:`streammom.datasets.make_hierarchical_bernoulli`); leaf
    shares from Dirichlet(``concentration``) seeded 100 + seed when given
    (``uncovered_shapes``'s skewed shares)."""
    weights = (None if concentration is None else
               np.random.default_rng(100 + seed).dirichlet(np.full(k, concentration)))
    extra = {} if signal is None else {"signal": signal}
    X, y, _, truth = make_hierarchical_bernoulli(n, d, k, codes_per_event=codes,
                                                 leaf_weights=weights, random_state=seed,
                                                 return_truth=True, **extra)
    X = sp.csr_array(X)
    return X, y, map_assign(X, truth.prevalence, truth.leaf_weights, "bernoulli"), k


def _issue(n: int, seed: int) -> Stream:
    """``quality_real``'s code streams in the acceptance protocol's order 0."""
    from quality_real import _shuffled, _synthetic

    s = _shuffled(_synthetic(n, seed))
    assert s.oracle is not None
    return s.X, s.y, s.oracle, s.k


def _random_tree(n: int, d: int, k: int, codes: float, sep: float, seed: int) -> Stream:
    from random_tree_streams import random_tree_codes

    X, y, prevalence, shares = random_tree_codes(n, d, k, codes, sep, seed)
    return X, y, map_assign(X, prevalence, shares, "bernoulli"), k


def _phase(n: int, d: int, k: int, seed: int, order: str) -> Stream:
    """The issue's generator fed in one of ``phase_streams``' orders."""
    from phase_streams import arrival

    X, y, oracle, k = _hierarchical(n, d, k, 10.0, seed)
    p = arrival(y, order, seed)
    return X[p], y[p], oracle[p], k


def _icd(n: int, k: int, seed: int) -> Stream:
    from icd_phenotype_streams import icd_phenotype_codes

    X, y, prevalence, shares = icd_phenotype_codes(n, k, seed)
    return X, y, map_assign(X, prevalence, shares, "bernoulli"), k


GENERATORS: dict[str, Callable[..., Stream]] = {
    "hierarchical": _hierarchical, "issue": _issue, "rtree": _random_tree, "icd": _icd,
    "phase": _phase,
}


def _cases(family: str) -> Iterator[Case]:
    """The streams of ``family`` (module docstring)."""
    if family == "issue":
        for n, seed in ((500, 2), (3_000, 3), (20_000, 0), (20_000, 1), (100_000, 0)):
            yield Case(family, f"{n:,} events, seed {seed}", ("issue", n, seed), n * 8)
    elif family == "short":
        from short_streams import LENGTHS

        for n in LENGTHS:
            for seed in range(26):
                yield Case(family, f"{n:,} events, seed {seed}", ("issue", n, seed), n * 8)
    elif family == "long":
        from long_streams import STREAMS as LONG

        for n, d, k, codes, signal in LONG:
            for seed in range(4):
                yield Case(family, f"{n:,} × {d:,} × {k}, {codes:g} codes, signal {signal:g}, "
                           f"seed {seed}", ("hierarchical", n, d, k, codes, seed, signal), n * k)
    elif family == "rtree":
        from random_tree_streams import STREAMS as TREES

        for n, d, k, codes, sep in TREES:
            for seed in range(4):
                yield Case(family, f"{n:,} × {d:,} × {k}, {codes:g} codes, sep {sep:g}, "
                           f"seed {seed}", ("rtree", n, d, k, codes, sep, seed), n * k)
    elif family == "shapes":
        from random_shapes import CODES, EVENTS, FEATURES, LEAVES

        for draw in (3, 4):  # random_shapes' default draws, its generator replayed
            rng = np.random.default_rng(1000 + draw)
            for _ in range(14):
                n, d = int(rng.choice(EVENTS)), int(rng.choice(FEATURES))
                k, codes = int(rng.choice(LEAVES)), float(rng.choice(CODES))
                seed = int(rng.integers(100, 10_000))
                yield Case(family, f"{n:,} × {d:,} × {k}, {codes:g} codes, seed {seed}",
                           ("hierarchical", n, d, k, codes, seed), n * k)
    elif family in ("skewed", "leaves32", "codes3"):
        from uncovered_shapes import SHAPES

        wanted = {"skewed": "skewed shares", "leaves32": "32 leaves",
                  "codes3": "three codes an event"}[family]
        for name, n, d, k, codes, concentration in SHAPES:
            if name != wanted:
                continue
            for seed in range(4):
                yield Case(family, f"{n:,} × {d:,} × {k}, {codes:g} codes, seed {seed}",
                           ("hierarchical", n, d, k, codes, seed, None, concentration), n * k)
    elif family.startswith("icd"):
        n, k, seeds = {"icd8": (2_000, 8, 16), "icd16": (5_000, 16, 12),
                       "icd20k": (20_000, 16, 4)}[family]
        for seed in range(seeds):
            yield Case(family, f"{n:,} × {k} phenotypes, seed {seed}", ("icd", n, k, seed),
                       n * k)
    elif family == "many":
        from many_leaves import STREAMS as MANY

        for n, d, k in MANY:
            for seed in range(2):
                yield Case(family, f"{n:,} × {d:,} × {k}, seed {seed}",
                           ("hierarchical", n, d, k, 10.0, seed), n * k)
    elif family == "phase":
        from phase_streams import ORDERS, SHAPES

        for n, d, k in SHAPES:
            for seed in range(2):
                for order in ORDERS:
                    if order != "random":  # the random order is the other families' own
                        yield Case(family, f"{n:,} × {d:,} × {k}, seed {seed}, {order}",
                                   ("phase", n, d, k, seed, order), n * k)
    else:
        raise SystemExit(f"unknown family {family!r}")


def run_case(case: Case) -> Result:
    """The acceptance protocol on one stream."""
    from long_streams import stream_labels

    kind, *args = case.args
    X, y, oracle_labels, k = GENERATORS[kind](*args)
    t0 = time.perf_counter()
    labels = stream_labels(X, X.shape[1], k)
    seconds = time.perf_counter() - t0
    oracle, ari = adjusted_rand_score(y, oracle_labels), adjusted_rand_score(y, labels)
    return Result(case.family, case.name, round(oracle, 6), round(ari, 6),
                  round(ari / oracle, 6), len(np.unique(labels)), k, round(seconds, 2))


def summary(results: list[Result]) -> dict[str, tuple[int, int, float, int]]:
    """Per family: (streams, streams at ≥ the bar, mean ratio, streams under k/2 labels)."""
    out: dict[str, tuple[int, int, float, int]] = {}
    for family in dict.fromkeys(r.family for r in results):
        mine = [r for r in results if r.family == family]
        out[family] = (len(mine), sum(r.ratio >= BAR for r in mine),
                       float(np.mean([r.ratio for r in mine])),
                       sum(r.labels < r.k / 2 for r in mine))
    return out


def _read(path: str) -> list[Result]:
    with open(path, encoding="utf-8") as f:
        return [Result(**json.loads(line)) for line in f if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=list(DEFAULT_FAMILIES))
    ap.add_argument("--jobs", type=int, default=1, help="processes (one BLAS thread each)")
    ap.add_argument("--limit", type=int, default=None, help="at most N streams a family")
    ap.add_argument("--out", help="write one JSON line a stream here")
    ap.add_argument("--compare", help="an earlier --out file: the streams that moved")
    args = ap.parse_args()
    print(f"command: python {' '.join(sys.argv)}\n", flush=True)
    cases = [c for family in args.families
             for i, c in enumerate(_cases(family)) if args.limit is None or i < args.limit]
    order = {c: i for i, c in enumerate(cases)}
    results: list[Result] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_case, c) for c in sorted(cases, key=lambda c: -c.size)]
        for future in as_completed(futures):
            r = future.result()
            results.append(r)
            print(f"{r.family:8s} {r.case:55s} {r.ratio:.3f} ({r.labels} of {r.k}, "
                  f"{r.seconds:.1f} s)", flush=True)
    by_name = {(c.family, c.name): order[c] for c in cases}
    results.sort(key=lambda r: by_name[(r.family, r.case)])
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            for r in results:
                f.write(json.dumps(asdict(r)) + "\n")
    ran = {(r.family, r.case) for r in results}
    earlier = [r for r in (_read(args.compare) if args.compare else [])
               if (r.family, r.case) in ran]  # the streams run now, and only those
    if earlier:
        before = {(r.family, r.case): r for r in earlier}
        moved = [(before[(r.family, r.case)], r) for r in results
                 if (r.family, r.case) in before
                 and abs(before[(r.family, r.case)].ratio - r.ratio) >= 0.001]
        print(f"\n{len(moved)} of {len(earlier)} streams moved by 0.001 or more")
        if moved:
            print("\n| family | stream | before | now |\n|---|---|---:|---:|")
            for old, r in moved:
                print(f"| {r.family} | {r.case} | {old.ratio:.3f} | {r.ratio:.3f} |")
    old_summary = summary(earlier)
    print(f"\n| family | streams | ≥ {BAR} × the oracle | mean | under k/2 labels |"
          + (" before: ≥ bar, mean |" if earlier else ""))
    print("|---|---:|---:|---:|---:|" + ("---|" if earlier else ""))
    for family, (n, ok, mean, few) in summary(results).items():
        row = f"| {family} | {n} | {ok} | {mean:.3f} | {few} |"
        if family in old_summary:
            _, old_ok, old_mean, _ = old_summary[family]
            row += f" {old_ok}, {old_mean:.3f} |"
        print(row)


if __name__ == "__main__":
    main()
