"""What a reader of an engine snapshot checks without the engine: the schema, the manifest's
bounds and the routing model it carries (:mod:`streammom.engine_archive` writes and restores
the whole state; this module is what model-only readers — ``inspect``, ``report`` — load: no
sums, no scipy, no compiled kernels).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from streammom.model import MAX_NODE_ID, HierarchyModel, check_tree
from streammom.packed import packed_size
from streammom.serialization import DEFAULT_MAX_BYTES, SnapshotFormatError

__all__ = ["ENGINE_READS_SCHEMAS", "ENGINE_SCHEMA_VERSION", "MODEL_PREFIX",
           "check_engine_archive", "stored_model"]

ENGINE_SCHEMA_VERSION = 2
#: Older schemas this version reads: 1 had packed sums only (2 adds row-held C, ``C_rows_*``).
ENGINE_READS_SCHEMAS = (1,)
#: Engine archives also carry the routing model (manifest ``"model"``, arrays under this
#: prefix), so readers that need only the tree (``inspect``, ``report``) never inflate sums.
MODEL_PREFIX = "model."


def stored_model(manifest: Mapping[str, Any],
                 arrays: Mapping[str, np.ndarray]) -> HierarchyModel | None:
    """The routing model stored in an engine archive (``None`` in archives written before it
    was stored), checked to describe the archive's tree: same width, same nodes, same links."""
    meta = manifest.get("model")
    if meta is None:
        return None
    model = HierarchyModel.from_archive(meta, {k[len(MODEL_PREFIX):]: v for k, v in arrays.items()
                                               if k.startswith(MODEL_PREFIX)})
    links = {int(m["id"]): (int(m["parent"]), tuple(int(c) for c in m["children"]))
             for m in manifest["nodes"]}
    if model.n_features != manifest["n_features"] or links != {
            nid: (n.parent, tuple(n.children)) for nid, n in model.nodes.items()}:
        raise SnapshotFormatError("malformed engine snapshot: the stored model does not "
                                  "describe the engine's tree")
    return model


def check_engine_archive(manifest: Mapping[str, Any],
                         by_node: Mapping[str, Mapping[str, np.ndarray]], *,
                         sums: bool = True) -> None:
    """Refuse an engine archive whose manifest would make ``from_archive`` allocate beyond
    what the archive holds, before anything is allocated.

    Checked: ``n_features`` d with d(d+1)/2 float64 sums per node within
    :data:`DEFAULT_MAX_BYTES`; node ids distinct, in [0, :data:`MAX_NODE_ID`] and below
    ``state.next_id``; each node's ``s`` (and ``C`` when it has one) present with the shapes
    d implies; each reservoir of width ≤ 2d + 8, and all of them together (``capacity ×
    width`` index/value buffers, allocated on restore but not stored) within
    :data:`DEFAULT_MAX_BYTES`; the tree (one root — ``state.root_id`` —, links consistent
    both ways, no cycle). ``sums=False`` (a model-only reader, which has not read the sums)
    skips the checks of the sums' arrays.
    """
    bad = "malformed engine snapshot: "
    nodes = manifest["nodes"]
    if not isinstance(nodes, list) or not all(isinstance(m, dict) for m in nodes):
        raise SnapshotFormatError(bad + "nodes must be a list of objects")
    if manifest["n_features"] is None:
        if nodes or manifest.get("vocabulary") is not None:
            raise SnapshotFormatError(bad + "nodes or a vocabulary without n_features")
        return
    d = int(manifest["n_features"])
    if d < 2 or packed_size(d) * 8 > DEFAULT_MAX_BYTES:
        raise SnapshotFormatError(bad + f"n_features {d} is out of range")
    vocab = manifest.get("vocabulary")
    grows_to = int(vocab["capacity"]) if isinstance(vocab, dict) and "capacity" in vocab else d
    if packed_size(grows_to) * 8 > DEFAULT_MAX_BYTES:  # the state grows up to the capacity
        raise SnapshotFormatError(bad + f"vocabulary capacity {grows_to} is out of range")
    capacity = int(manifest["config"]["reservoir_size"])
    ids = [int(meta["id"]) for meta in nodes]
    if len(set(ids)) != len(ids) or not all(0 <= i <= MAX_NODE_ID for i in ids):
        raise SnapshotFormatError(bad + f"node ids must be distinct, in [0, {MAX_NODE_ID}]")
    if ids and int(manifest["state"]["next_id"]) <= max(ids):
        raise SnapshotFormatError(bad + "state.next_id is not above every node id")
    links = {nid: (int(meta["parent"]), [int(c) for c in meta["children"]])
             for nid, meta in zip(ids, nodes, strict=True)}
    try:
        root = check_tree(links) if links else int(manifest["state"]["root_id"])
    except ValueError as exc:
        raise SnapshotFormatError(bad + str(exc)) from exc
    if root != int(manifest["state"]["root_id"]):
        raise SnapshotFormatError(bad + f"root_id {manifest['state']['root_id']} is not the "
                                  "tree's root")
    reservoir_bytes = capacity * (8 * 12 + 4)  # the root a vocabulary's constructor makes
    for nid, meta in zip(ids, nodes, strict=True):
        sub = by_node.get(f"n{nid}", {})
        acc, res = meta["acc"], meta["reservoir"]
        s, C = sub.get("s"), sub.get("C")
        dense_ok = C is not None and C.shape == (packed_size(d),)
        sparse_ok = C is None and sub.get("C_at") is not None and sub.get("C_val") is not None
        rows_ok = C is None and all(sub.get(f"C_rows_{k}") is not None
                                    for k in ("indptr", "indices", "data", "w"))
        c_ok = not acc["has_C"] or dense_ok or sparse_ok or rows_ok
        if int(acc["n_features"]) != d or (sums and (s is None or s.shape != (d,) or not c_ok)):
            raise SnapshotFormatError(bad + f"node {nid}: sums do not match n_features {d}")
        width, rows = int(res["width"]), int(res["capacity"])
        if int(res["n_features"]) != d or rows < 1 or not 0 <= width <= 2 * d + 8:
            raise SnapshotFormatError(bad + f"node {nid}: reservoir does not match n_features")
        reservoir_bytes += rows * (max(width, 8) * 12 + 4)
    if reservoir_bytes > DEFAULT_MAX_BYTES:
        raise SnapshotFormatError(
            bad + f"the reservoirs would take {reservoir_bytes} bytes > {DEFAULT_MAX_BYTES}"
        )
