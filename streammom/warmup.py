"""Start-up: load the engine's compiled kernels before the first batch (see :func:`warm_up`)."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from streammom.engine import StreamingHierarchy

__all__ = ["warm_up"]


def warm_up() -> float:
    """Load the compiled hot-path kernels now instead of on the first batch; returns seconds.

    The kernels (:mod:`streammom._kernels`) are compiled by numba on their first use on a
    machine (a few seconds) and loaded from its on-disk cache afterwards (a fraction of a
    second). A long-running worker calls this at start-up so the first batch's latency is not
    the compiler's. With each family it learns a tiny synthetic batch, refits and learns it again
    (routed through the new split), which exercises every kernel with the argument types the
    engine uses.

    >>> warm_up() >= 0.0
    True
    """
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    X = sp.csr_array((rng.random((256, 16)) < 0.3) * rng.integers(1, 3, size=(256, 16)),
                     dtype=np.float64)
    for family in ("bernoulli", "multinomial"):
        eng = StreamingHierarchy(16, family=family, min_split_weight=1.0,  # type: ignore[arg-type]
                                 min_reservoir_split=8, reservoir_size=64)
        Xf = X if family == "multinomial" else (X > 0).astype(np.float64)
        eng.learn(Xf)
        eng.refit()
        eng.learn(Xf)
    return time.perf_counter() - t0

