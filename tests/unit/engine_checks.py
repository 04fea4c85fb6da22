"""Assertions on streaming engines shared by the unit tests."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

from streammom import StreamingHierarchy


def assert_same_sums_and_routers(a: StreamingHierarchy, b: StreamingHierarchy) -> None:
    """The two engines hold the same nodes with the same first-order sums and routers: the
    events went the same way (what differs between them, if anything, is the leaves'
    scores)."""
    assert a.nodes_.keys() == b.nodes_.keys()
    for nid, v in a.nodes_.items():
        u = b.nodes_[nid]
        np.testing.assert_array_equal(v.acc.s, u.acc.s)
        assert v.acc.weight == u.acc.weight
        assert (v.router is None) == (u.router is None)
        assert v.router is None or v.router.same_as(u.router)


def acceptance_ari(X: sp.csr_array, y: np.ndarray, max_leaves: int) -> float:
    """Issue #15's acceptance protocol on ``X``: ``StreamingHierarchy`` at its defaults (only
    the features and ``max_leaves``), one pass in batches of 1,000, then ``predict``; the ARI
    of its labels against ``y``."""
    eng = StreamingHierarchy(X.shape[1], max_leaves=max_leaves)
    for start in range(0, X.shape[0], 1_000):
        eng.partial_fit(X[start:start + 1_000])
    return float(adjusted_rand_score(y, eng.predict(X)))
