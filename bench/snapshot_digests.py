"""SHA-256 digests of the snapshots the estimators write on fixed bench streams.

    .venv/bin/python bench/snapshot_digests.py                      # print the digests
    .venv/bin/python bench/snapshot_digests.py --write FILE         # record them (JSON)
    .venv/bin/python bench/snapshot_digests.py --check FILE         # exit 1 on any difference

A refactoring must not change a single byte of what the estimators learn: run ``--write`` on
the code before the change and ``--check`` after it, on the same machine (the digests pin
floating-point results, so another BLAS or CPU may differ; they are not a test of correctness).
BLAS is pinned to one thread before numpy loads so the reductions run in one order.

Cases (each a few seconds): the throughput benchmark's engine configuration on a 300,000-event
prefix of its stream; the engine at its default settings; the multinomial family with
time decay; two forks merged; snapshot → restore → more events; and the two batch estimators
(``HierarchicalMoM`` with each method, ``SpectralMixture`` with and without EM); and the
daemon's data path through the CLI (``fit``, ``assign``, embedded ``run``).
"""

from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streammom import HierarchicalMoM, SpectralMixture, StreamingHierarchy  # noqa: E402
from streammom.datasets import make_block_topics, make_hierarchical_bernoulli  # noqa: E402

D = 2_000
BATCH = 32_768
THROUGHPUT_KW: dict[str, Any] = {  # bench/throughput.py ENGINE_KW, refit every 100k events
    "max_depth": 4, "max_leaves": 16, "basis_dim": 8, "refit_every": 100_000,
    "reservoir_size": 2048, "min_split_weight": 500.0, "chunk_size": BATCH, "random_state": 0,
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _stream(n: int, seed: int) -> sp.csr_array:
    X, _, _ = make_hierarchical_bernoulli(n, D, 16, codes_per_event=10.0, random_state=seed)
    return X


def _feed(eng: StreamingHierarchy, X: sp.csr_array, batch: int = BATCH,
          timestamps: np.ndarray | None = None) -> StreamingHierarchy:
    for start in range(0, X.shape[0], batch):
        ts = None if timestamps is None else timestamps[start:start + batch]
        eng.partial_fit(X[start:start + batch], timestamps=ts)
    return eng


def _engine(eng: StreamingHierarchy) -> dict[str, str]:
    eng.refit()
    return {"engine": _sha(eng.snapshot()), "model": _sha(eng.model_.to_bytes())}


def case_throughput() -> dict[str, str]:
    return _engine(_feed(StreamingHierarchy(D, **THROUGHPUT_KW), _stream(300_000, 0)))


def case_defaults() -> dict[str, str]:
    return _engine(_feed(StreamingHierarchy(D), _stream(40_000, 1), batch=4_096))


def case_multinomial_decay() -> dict[str, str]:
    X, _ = make_block_topics(6_000, 60, random_state=2)
    ts = 1.7e9 + np.arange(X.shape[0], dtype=np.float64) * 10.0
    eng = StreamingHierarchy(X.shape[1], family="multinomial", max_depth=3, refit_every=1_500,
                             half_life=20_000.0, random_state=3)
    return _engine(_feed(eng, X, batch=1_000, timestamps=ts))


def case_renormalise() -> dict[str, str]:
    """A half-life short enough that the stored sums are renormalised several times."""
    eng = StreamingHierarchy(D, half_life=500.0, refit_every=8_000, random_state=13)
    return _engine(_feed(eng, _stream(40_000, 14), batch=2_000))


def case_merge() -> dict[str, str]:
    X = _stream(60_000, 4)
    # fixed refit points (no growth schedule): shards must not refit between fork and merge
    base = _feed(StreamingHierarchy(D, refit_every=30_000, first_refit=None, random_state=5),
                 X[:30_000], 5_000)
    other = base.fork()
    _feed(base, X[30_000:45_000], 5_000)
    _feed(other, X[45_000:], 5_000)
    return _engine(base.merge(other))


def case_restore() -> dict[str, str]:
    X = _stream(50_000, 6)
    eng = _feed(StreamingHierarchy(D, refit_every=10_000, random_state=7), X[:25_000], 5_000)
    back = StreamingHierarchy.restore(eng.snapshot())
    return _engine(_feed(back, X[25_000:], 5_000))


def _fitted(est: Any) -> dict[str, str]:
    """Digest every fitted array attribute (name ends in ``_``) and the model bytes if any."""
    out = {}
    for name in sorted(vars(est)):
        value = getattr(est, name)
        if name.endswith("_") and isinstance(value, np.ndarray):
            out[name] = _sha(np.ascontiguousarray(value).tobytes())
    model = getattr(est, "model_", None)
    if model is not None:
        out["model"] = _sha(model.to_bytes())
    return out


def case_hierarchical() -> dict[str, str]:
    X = _stream(20_000, 8)
    out = {}
    for method in ("dsidiwo", "sidiwo"):
        est = HierarchicalMoM(max_depth=3, method=method, random_state=9).fit(X)
        out.update({f"{method}.{k}": v for k, v in _fitted(est).items()})
    return out


def case_spectral() -> dict[str, str]:
    X, _ = make_block_topics(2_000, 80, random_state=10)
    out = {}
    for em in (False, True):
        est = SpectralMixture(8, family="multinomial", em=em, random_state=11).fit(X)
        out.update({f"em={em}.{k}": v for k, v in _fitted(est).items()})
    return out


def case_service() -> dict[str, str]:
    """The daemon's data path end to end through the CLI: ``fit``, ``assign`` and the embedded
    ``run`` on 20,000 sample encounters (the run's model file; its checkpoint carries a random
    worker id and times, so it is not compared)."""
    from service.commands.produce import sample_messages

    exe = str(Path(sys.executable).with_name("streammom"))
    refit = ["--set", "model.refit_every=5000"]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        events = d / "events.jsonl"
        events.write_bytes(b"".join(v + b"\n" for _, v in sample_messages(20_000, seed=12)))
        for args in (["fit", str(events), "-o", str(d / "fit.smm"), "--no-progress", *refit],
                     ["assign", str(d / "fit.smm"), str(events), "-o", str(d / "assigned.jsonl")],
                     ["run", "--input", str(events), "--output", str(d / "run.jsonl"),
                      "--checkpoint-dir", str(d / "ckpt"), *refit]):
            subprocess.run([exe, *args], check=True, capture_output=True)
        return {name: _sha((d / name).read_bytes())
                for name in ("fit.smm", "assigned.jsonl", "run.jsonl", "ckpt/model.smm")}


CASES: dict[str, Callable[[], dict[str, str]]] = {
    "throughput": case_throughput,
    "defaults": case_defaults,
    "multinomial_decay": case_multinomial_decay,
    "renormalise": case_renormalise,
    "merge": case_merge,
    "restore": case_restore,
    "hierarchical": case_hierarchical,
    "spectral": case_spectral,
    "service": case_service,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, help="record the digests in this JSON file")
    group.add_argument("--check", type=Path, help="compare with digests recorded by --write")
    args = ap.parse_args(argv)
    digests = {name: case() for name, case in CASES.items()}
    if args.write:
        args.write.write_text(json.dumps(digests, indent=2, sort_keys=True) + "\n")
    text = json.dumps(digests, indent=2, sort_keys=True)
    if not args.check:
        print(text)
        return 0
    expected = json.loads(args.check.read_text())
    diffs = [f"{case}.{key}" for case in sorted(set(expected) | set(digests))
             for key in sorted(set(expected.get(case, {})) | set(digests.get(case, {})))
             if expected.get(case, {}).get(key) != digests.get(case, {}).get(key)]
    for what in diffs:
        print(f"differs: {what}")
    print(f"{sum(len(v) for v in digests.values()) - len(diffs)} digests equal, "
          f"{len(diffs)} differ")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
