"""Small hand-built models shared by the unit tests."""

from __future__ import annotations

import numpy as np

from streammom.model import HierarchyModel, Router, TreeNode, map_router


def small_tree(d: int = 4, version: int = 3) -> HierarchyModel:
    """Root splits by D-SIDIWO on {0,1} vs {2,3}; node 2 splits by Bernoulli MAP on 2 vs 3."""
    root = TreeNode(0, -1, 0, 10.0, np.full(d, 0.5), (1, 2),
                    Router(np.array([[1.0, 1, 0, 0], [0, 0, 1, 1]]), np.zeros(2), absolute=True))
    left = TreeNode(1, 0, 1, 5.0, np.array([0.9, 0.9, 0.0, 0.0]))
    right = TreeNode(2, 0, 1, 5.0, np.array([0.0, 0.0, 0.5, 0.5]), (3, 4),
                     map_router(np.array([[0.1, 0.1, 0.9, 0.1], [0.1, 0.1, 0.1, 0.9]]),
                                np.array([0.5, 0.5]), "bernoulli"))
    a = TreeNode(3, 2, 2, 2.5, np.array([0.0, 0.0, 0.9, 0.1]))
    b = TreeNode(4, 2, 2, 2.5, np.array([0.0, 0.0, 0.1, 0.9]))
    return HierarchyModel([b, a, right, left, root], n_features=d, feature_names=list("abcd"),
                          version=version)

