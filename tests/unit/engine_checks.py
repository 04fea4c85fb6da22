"""Assertions on streaming engines shared by the unit tests."""

from __future__ import annotations

import numpy as np

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
