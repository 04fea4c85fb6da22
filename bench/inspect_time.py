"""``streammom inspect`` of a 16-leaf engine snapshot: the command's wall time.

    .venv/bin/python bench/inspect_time.py [--events 200000] [--capacity 4096] [--runs 3]

Issue #14 (model-only reads): an engine with a growing vocabulary of ``--capacity`` columns
(codes ``C0000`` …, so the ICD-10-CM names table is consulted, as for real codes) learns
``--events`` synthetic encounters (:func:`streammom.datasets.make_hierarchical_bernoulli`, 16
latent leaves, ~10 codes an event) in batches of 2,000 at its defaults; its snapshot is
written to a temporary file and ``streammom inspect`` runs on it ``--runs`` times as a fresh
process (interpreter start-up and imports included), then ``streammom --help`` for the
start-up alone. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streammom import StreamingHierarchy, Vocabulary
from streammom.datasets import make_hierarchical_bernoulli


def timed(args: list[str]) -> float:
    """Wall seconds of one run of the command ``args``."""
    t0 = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--capacity", type=int, default=4_096)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    X, _, _ = make_hierarchical_bernoulli(args.events, args.capacity, 16, codes_per_event=10.0,
                                          random_state=0)
    names = np.array([f"C{i:04d}" for i in range(args.capacity)])
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=args.capacity))
    for start in range(0, args.events, 2_000):
        stop = min(start + 2_000, args.events)
        eng.partial_fit([names[X.indices[X.indptr[i]:X.indptr[i + 1]]].tolist()
                         for i in range(start, stop)])
    cli = str(Path(sys.executable).with_name("streammom"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "engine.smm"
        path.write_bytes(eng.snapshot())
        runs = [timed([cli, "inspect", str(path)]) for _ in range(args.runs)]
        size_mb = path.stat().st_size / 1e6
    help_s = timed([cli, "--help"])
    print(json.dumps({
        "events": args.events, "leaves": eng.model_.n_leaves, "columns": len(eng.vocabulary),
        "snapshot_mb": round(size_mb), "inspect_s": [round(s, 2) for s in runs],
        "help_s": round(help_s, 2),
    }))


if __name__ == "__main__":
    main()
