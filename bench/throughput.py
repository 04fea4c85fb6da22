"""Streaming throughput: StreamingHierarchy.partial_fit vs online peers on the same stream.

    .venv/bin/python bench/throughput.py [--events 2000000] [--memory-only]

One run, one core (OMP/OpenBLAS/MKL pinned to 1 thread before numpy loads). The stream is
synthetic encounters from :func:`streammom.datasets.make_hierarchical_bernoulli`: d = 2,000
codes, ~10 codes per event, a depth-4 tree of 16 latent leaves. Every method sees the stream in
arrival order; ARI is measured against the true leaves on 50,000 held-out events of the same
mixture.

* **streammom** — ``StreamingHierarchy(max_depth=4, max_leaves=16, basis_dim=8,
  reservoir_size=2048, refit_every=200_000)`` fed 32,768-event batches through
  ``partial_fit``; the refit policy runs inside the timed loop, so the rate includes routing,
  moment updates and every refit (growing the tree from the root); the compiled kernels are
  loaded once before timing (start-up, as in the daemon). Ingest-only rate and refit
  time are reported in the notes.
* scikit-learn ``MiniBatchKMeans.partial_fit`` (k = 16, same batches, whole stream) and
  ``LatentDirichletAllocation.partial_fit`` (online variational Bayes, k = 16, 4,096-event
  batches, on a prefix of the stream: it is much slower).
* gensim ``LdaModel.update`` (k = 16, 4,096-event chunks, prefix; conversion to gensim's
  bag-of-words lists is done before timing).
* River ``cluster.KMeans`` and ``cluster.DBSTREAM``: one dict per event (``learn_one``), on a
  prefix (dict conversion before timing). Their rates are per event, measured honestly.

``--memory-only`` (run in a fresh process by the main run) grows a depth-5 tree (32 leaves) at
d = 2,000 and prints the peak resident set size over the tree's growth (the compiled kernels are
loaded first and the peak is reset after them: compiling on a fresh checkout is start-up).

``run()`` returns the rows; ``main()`` prints a markdown table and the command.
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streammom import StreamingHierarchy, warm_up  # noqa: E402
from streammom.datasets import make_hierarchical_bernoulli  # noqa: E402

D = 2_000
LEAVES = 16
CODES = 10.0
BATCH = 32_768
N_EVAL = 50_000
ENGINE_KW: dict[str, Any] = {
    "max_depth": 4,
    "max_leaves": 16,
    "basis_dim": 8,
    "refit_every": 200_000,
    "reservoir_size": 2048,
    "min_split_weight": 500.0,
    "chunk_size": BATCH,
    "random_state": 0,
}


def _stream(n: int, leaves: int = LEAVES, seed: int = 0) -> tuple[sp.csr_array, np.ndarray]:
    X, y, _ = make_hierarchical_bernoulli(n, D, leaves, codes_per_event=CODES,
                                          random_state=seed)
    return X, y


def adjusted_rand_score(a: np.ndarray, b: np.ndarray) -> float:
    from sklearn.metrics import adjusted_rand_score as ari  # lazy: not in the memory run

    return float(ari(a, b))


def _row(method: str, events: int, seconds: float, ari: float, notes: str) -> dict[str, Any]:
    return {"method": method, "events": int(events), "seconds": float(seconds),
            "events_per_s": float(events / seconds) if seconds > 0 else float("nan"),
            "ari": float(ari), "notes": notes}


def bench_streammom(X: sp.csr_array, Xe: sp.csr_array, ye: np.ndarray) -> dict[str, Any]:
    warm_up()  # untimed start-up: load (or compile) the kernels, as the daemon does
    eng = StreamingHierarchy(D, **ENGINE_KW)
    refit_s = 0.0
    t0 = time.perf_counter()
    for s in range(0, X.shape[0], BATCH):
        before = eng.n_refits_
        eng.partial_fit(X[s : s + BATCH])
        if eng.n_refits_ != before:
            refit_s += eng.last_refit_duration_
    total = time.perf_counter() - t0
    eng.refit()
    ari = adjusted_rand_score(ye, eng.predict(Xe))
    n = X.shape[0]
    row = _row("streammom StreamingHierarchy.partial_fit", n, total, ari,
               f"refit_every={ENGINE_KW['refit_every']:,}; {eng.n_refits_ - 1} refits "
               f"({refit_s:.1f} s) inside the timing; ingest only "
               f"{n / max(total - refit_s, 1e-9):,.0f} ev/s; {eng.model_.n_leaves} leaves, "
               f"basis_dim={ENGINE_KW['basis_dim']}")
    row["ingest_events_per_s"] = n / max(total - refit_s, 1e-9)
    row["refit_seconds"] = refit_s
    row["refit_seconds_last"] = eng.last_refit_duration_
    return row


def _int32(X: sp.csr_array) -> sp.csr_matrix:
    """scikit-learn's sparse estimators want 32-bit indices (converted untimed)."""
    return sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                         shape=X.shape)


def bench_minibatch_kmeans(X: sp.csr_array, Xe: sp.csr_array, ye: np.ndarray) -> dict[str, Any]:
    from sklearn.cluster import MiniBatchKMeans

    X, Xe = _int32(X), _int32(Xe)
    km = MiniBatchKMeans(n_clusters=LEAVES, random_state=0, n_init=1)
    t0 = time.perf_counter()
    for s in range(0, X.shape[0], BATCH):
        km.partial_fit(X[s : s + BATCH])
    total = time.perf_counter() - t0
    return _row("scikit-learn MiniBatchKMeans.partial_fit", X.shape[0], total,
                adjusted_rand_score(ye, km.predict(Xe)), f"k={LEAVES}, batches of {BATCH:,}")


def bench_sklearn_lda(X: sp.csr_array, Xe: sp.csr_array, ye: np.ndarray) -> dict[str, Any]:
    from sklearn.decomposition import LatentDirichletAllocation

    X, Xe = _int32(X), _int32(Xe)
    lda = LatentDirichletAllocation(n_components=LEAVES, learning_method="online",
                                    total_samples=X.shape[0], random_state=0)
    t0 = time.perf_counter()
    for s in range(0, X.shape[0], 4096):
        lda.partial_fit(X[s : s + 4096])
    total = time.perf_counter() - t0
    pred = np.argmax(lda.transform(Xe), axis=1)
    return _row("scikit-learn LatentDirichletAllocation.partial_fit", X.shape[0], total,
                adjusted_rand_score(ye, pred),
                f"online VB, k={LEAVES}, batches of 4,096, prefix of the stream")


def _bow(X: sp.csr_array) -> list[list[tuple[int, float]]]:
    return [list(zip(X.indices[X.indptr[i] : X.indptr[i + 1]].tolist(),
                     X.data[X.indptr[i] : X.indptr[i + 1]].tolist(), strict=True))
            for i in range(X.shape[0])]


def bench_gensim_lda(X: sp.csr_array, Xe: sp.csr_array, ye: np.ndarray) -> dict[str, Any]:
    from gensim.models import LdaModel

    corpus = _bow(X)
    lda = LdaModel(num_topics=LEAVES, id2word={i: str(i) for i in range(D)}, chunksize=4096,
                   passes=1, update_every=1, random_state=0)
    t0 = time.perf_counter()
    for s in range(0, len(corpus), 4096):
        lda.update(corpus[s : s + 4096])
    total = time.perf_counter() - t0
    gamma, _ = lda.inference(_bow(Xe))
    return _row("gensim LdaModel.update", X.shape[0], total,
                adjusted_rand_score(ye, np.argmax(gamma, axis=1)),
                f"online VB, k={LEAVES}, chunks of 4,096, prefix; bag-of-words built untimed")


def _dicts(X: sp.csr_array) -> list[dict[int, float]]:
    return [dict.fromkeys(X.indices[X.indptr[i] : X.indptr[i + 1]].tolist(), 1.0)
            for i in range(X.shape[0])]


def bench_river(kind: str, X: sp.csr_array, Xe: sp.csr_array, ye: np.ndarray
                ) -> dict[str, Any]:
    from river import cluster

    model = (cluster.KMeans(n_clusters=LEAVES, seed=0) if kind == "KMeans"
             else cluster.DBSTREAM())
    events = _dicts(X)
    t0 = time.perf_counter()
    for x in events:
        model.learn_one(x)
    total = time.perf_counter() - t0
    pred = np.array([model.predict_one(x) for x in _dicts(Xe)])
    return _row(f"River cluster.{kind}.learn_one", X.shape[0], total,
                adjusted_rand_score(ye, pred),
                "one dict per event, prefix of the stream; dicts built untimed")


def _reset_peak_rss() -> None:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux ≥ 4.0). Where
    /proc/self/clear_refs is not writable this does nothing, and the peak covers start-up too."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_rss_mib() -> float:
    """VmHWM from /proc/self/status, else ru_maxrss (both in MiB)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def memory_depth5(n_events: int = 400_000) -> dict[str, Any]:
    """Grow a depth-5 tree (32 leaves) at d = 2,000; peak RSS of this process (MiB).

    The compiled kernels are loaded first (compiling them on a fresh checkout takes LLVM
    memory that is start-up, not the tree); the peak is then reset and measured over the
    growth of the tree, with the events resident.
    """
    X, _ = _stream(n_events, leaves=32, seed=1)  # ~50 MB of events stay resident
    warm_up()  # untimed start-up: load (or compile) the kernels, as the daemon does
    process_peak = _peak_rss_mib()
    _reset_peak_rss()
    eng = StreamingHierarchy(D, max_depth=5, max_leaves=32, refit_every=50_000,
                             chunk_size=BATCH, random_state=0)
    for s in range(0, X.shape[0], BATCH):
        eng.partial_fit(X[s : s + BATCH])
    eng.refit()
    peak = _peak_rss_mib()
    return {"nodes": len(eng.nodes_), "leaves": eng.model_.n_leaves,
            "depth": eng.model_.max_depth, "peak_rss_mib": peak, "events": n_events,
            "peak_before_tree_mib": process_peak}


def run(n_events: int = 2_000_000, *, peers: bool = True, memory: bool = True
        ) -> dict[str, Any]:
    """Run the benchmark; returns {"rows": [...], "memory": {...} or None}."""
    X, y = _stream(n_events + N_EVAL)
    Xs, Xe, ye = X[:n_events], X[n_events:], y[n_events:]
    rows = [bench_streammom(Xs, Xe, ye)]
    if peers:
        rows.append(bench_minibatch_kmeans(Xs, Xe, ye))
        rows.append(bench_sklearn_lda(Xs[:min(n_events, 100_000)], Xe, ye))
        rows.append(bench_gensim_lda(Xs[:min(n_events, 100_000)], Xe, ye))
        rows.append(bench_river("KMeans", Xs[:min(n_events, 5_000)], Xe[:2000], ye[:2000]))
        rows.append(bench_river("DBSTREAM", Xs[:min(n_events, 5_000)], Xe[:2000], ye[:2000]))
    mem = None
    if memory:
        out = subprocess.run([sys.executable, __file__, "--memory-only"], check=True,
                             capture_output=True, text=True)
        mem = json.loads(out.stdout.strip().splitlines()[-1])
    return {"rows": rows, "memory": mem}


def _print(result: dict[str, Any]) -> None:
    rows = result["rows"]
    ours = rows[0]["events_per_s"]
    print("| method | events timed | seconds | events/s | streammom × | ARI vs true leaves "
          "| notes |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        ratio = ours / r["events_per_s"]
        print(f"| {r['method']} | {r['events']:,} | {r['seconds']:.2f} | "
              f"{r['events_per_s']:,.0f} | {ratio:,.2f} | {r['ari']:.3f} | {r['notes']} |")
    mem = result["memory"]
    if mem:
        print(f"\nDepth-{mem['depth']} tree at d = {D:,} ({mem['nodes']} nodes, "
              f"{mem['leaves']} leaves, {mem['events']:,} events): peak RSS "
              f"{mem['peak_rss_mib']:,.0f} MiB (target < 1,536 MiB; events resident; the process "
              f"peaked at {mem['peak_before_tree_mib']:,.0f} MiB before the tree, loading the "
              f"kernels).")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--memory-only", action="store_true")
    args = ap.parse_args(argv)
    if args.memory_only:
        print(json.dumps(memory_depth5()))
        return
    print("# streammom streaming throughput (one core)\n")
    cmd = " ".join([".venv/bin/python bench/throughput.py", *sys.argv[1:]])
    print(f"command: `{cmd}`")
    print(f"\nstream: make_hierarchical_bernoulli(d={D:,}, leaves={LEAVES}, "
          f"codes_per_event={CODES:g}); held-out {N_EVAL:,} events for ARI\n")
    _print(run(args.events, peers=not args.no_peers, memory=not args.no_memory))


if __name__ == "__main__":
    main()
