"""Engine snapshots: the whole state of a :class:`~streammom.engine.StreamingHierarchy` as a
manifest + arrays archive (:mod:`streammom.serialization`; never pickle), and back.

The manifest holds the schema version, the configuration (the parameter table's JSON values),
the tree with each node's counters, the lineage, the engine's clocks and counters and the
vocabulary; the arrays hold each node's sums (W, s, C, T, T1–T3), reservoir, router and
discriminators. Reading validates everything before allocating (:func:`check_engine_archive`)
and before walking the tree (:func:`streammom.model.check_tree`): a snapshot is data from
outside. Same state → same bytes (sorted node order, deterministic archive writer).

These functions read and set the engine's private state: they are the engine's own
serialisation, kept apart so ``engine.py`` stays the orchestration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from streammom.decay import DecayClock
from streammom.engine_manifest import (
    ENGINE_READS_SCHEMAS,
    ENGINE_SCHEMA_VERSION,
    MODEL_PREFIX,
    check_engine_archive,
    stored_model,
)
from streammom.estimators import check_family
from streammom.model import (
    LeafScore,
    Router,
    check_tree,
    read_share,
    read_stop_reason,
)
from streammom.moments import MomentAccumulator
from streammom.packed import SparsePacked
from streammom.reservoir import Reservoir
from streammom.serialization import SnapshotFormatError, check_manifest
from streammom.tree import Node, leaf_layout
from streammom.vocab import Vocabulary

if TYPE_CHECKING:
    from streammom.engine import StreamingHierarchy

__all__ = ["ENGINE_READS_SCHEMAS", "ENGINE_SCHEMA_VERSION", "MODEL_PREFIX", "check_engine_archive",
           "engine_from_archive", "engine_to_archive", "stored_model"]

def _counter(fields: Mapping[str, Any], key: str) -> float:
    """A counter of a snapshot's state or node (0 when absent: an older snapshot), finite
    and non-negative, or the snapshot is refused."""
    value = float(fields.get(key, 0.0))
    if not (math.isfinite(value) and value >= 0.0):
        raise SnapshotFormatError(f"malformed engine snapshot: {key} = {value!r}")
    return value


def engine_to_archive(eng: StreamingHierarchy) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Manifest (schema, config, tree, lineage, counters, vocabulary, routing model) + arrays.

    The routing model (``model_``, as of its last rebuild) is stored beside the sums, so
    model-only readers (:func:`streammom.report.load_model`) read a few small members.
    """
    arrays: dict[str, np.ndarray] = {}
    model_manifest = None
    if eng.model_ is not None:
        model_manifest, model_arrays = eng.model_.to_archive()
        arrays.update({f"{MODEL_PREFIX}{k}": v for k, v in model_arrays.items()})
    nodes_meta = []
    for nid in sorted(eng.nodes_):
        v = eng.nodes_[nid]
        acc_meta, acc_arrays = v.acc.to_archive()
        res_meta, res_arrays = v.reservoir.to_archive()
        for name, arr in {**acc_arrays, **res_arrays}.items():
            arrays[f"n{nid}_{name}"] = arr
        if v.router is not None:
            arrays[f"n{nid}_router_w"] = v.router.weights
            arrays[f"n{nid}_router_b"] = v.router.bias
        if v.discriminators is not None:
            arrays[f"n{nid}_D"] = v.discriminators
        if v.score is not None:
            arrays[f"n{nid}_score_w"] = v.score.weights
        nodes_meta.append({
            "id": nid,
            "parent": v.parent,
            "depth": v.depth,
            "children": list(v.children),
            "absolute": None if v.router is None else bool(v.router.absolute),
            "has_D": v.discriminators is not None,
            "quality": {k: float(x) for k, x in sorted(v.quality.items())},
            "fresh": float(v.fresh),
            "arrived": float(v.arrived),
            "refit_rows": int(v.refit_rows),
            "backoff": v.backoff,
            "born_version": v.born_version,
            "stop_reason": v.stop_reason,
            **({"score_b": v.score.bias} if v.score is not None else {}),
            **({"score_share": v.score.share}
               if v.score is not None and v.score.share is not None else {}),
            "acc": acc_meta,
            "reservoir": res_meta,
        })
    state: dict[str, Any] = {
        "root_id": eng.root_id_,
        "model_version": eng.model_version_,
        "n_events_seen": eng.n_events_seen_,
        "n_rebases": eng.n_rebases_,
        "n_refits": eng.n_refits_,
        "n_light_refits": eng.n_light_refits_,
        "next_id": eng._next_id,
        "batch_counter": eng._batch_counter,
        "events_since_refit": eng._events_since_refit,
        "refit_spent": eng._refit_spent,
        "light_burst_spent": eng._light_burst_spent,
        "moved_at_last_refit": eng._moved_at_last_refit,
        "time_ref": eng._decay.time_ref,
        "clock": eng._decay.now,
        "refit_clock": eng._decay.refit_at,
        "last_refit_time": eng.last_refit_time_,
    }
    if eng.family == "auto":  # the family taken from the first batch (None: not yet)
        state["family"] = None if eng._family_pending else eng.family_
    manifest: dict[str, Any] = {
        "format": "streammom",
        "kind": "streaming-hierarchy",
        "schema_version": ENGINE_SCHEMA_VERSION,
        "config": eng.get_config(),
        "n_features": eng.n_features_,
        "state": state,
        "nodes": nodes_meta,
        "lineage": eng.lineage_,
        "vocabulary": None if eng.vocabulary is None else eng.vocabulary.to_archive()[0],
        "model": model_manifest,
    }
    return manifest, arrays


def engine_from_archive(
    cls: type[StreamingHierarchy], manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
) -> StreamingHierarchy:
    """Rebuild an engine from :meth:`to_archive` output (validates the schema).

    The archive is data from outside. Before anything is allocated, what the manifest
    declares is checked against the arrays it comes with (:func:`check_engine_archive`): the
    dimension, the vocabulary and every node's sums agree, and the reservoir buffers the
    nodes would allocate (not stored in the archive) fit :data:`DEFAULT_MAX_BYTES`. The
    tree is checked before anything walks it (one root — ``state.root_id`` —, links
    consistent both ways, no cycle, every node reachable, true depths). Any violation, or
    a missing or mistyped field, raises :class:`SnapshotFormatError` (one line).
    """
    check_manifest(
        manifest,
        kind="streaming-hierarchy",
        schema_version=ENGINE_SCHEMA_VERSION,
        what="engine snapshot",
        also_reads=ENGINE_READS_SCHEMAS,
    )
    try:
        by_node: dict[str, dict[str, np.ndarray]] = {}
        for key, arr in arrays.items():  # "n12_res_idx" → by_node["n12"]["res_idx"]
            if key.startswith(MODEL_PREFIX):
                continue  # the routing model is rebuilt from the sums
            head, sep, tail = key.partition("_")
            if sep:
                by_node.setdefault(head, {})[tail] = arr
        check_engine_archive(manifest, by_node)
        vocab = (None if manifest.get("vocabulary") is None
                 else Vocabulary.from_archive(manifest["vocabulary"]))
        if vocab is not None and not len(vocab) <= int(manifest["n_features"]) <= vocab.n_features:
            raise SnapshotFormatError(
                f"malformed engine snapshot: the engine has {manifest['n_features']} columns, "
                f"the vocabulary {len(vocab)} tokens and a capacity of {vocab.n_features}"
            )
        cfg = dict(manifest["config"])
        eng = cls(None, vocab, **cfg) if vocab is not None else cls(None, **cfg)
        d = manifest["n_features"]
        st = manifest["state"]
        eng.model_version_ = int(st["model_version"])
        eng.n_events_seen_ = int(st["n_events_seen"])
        eng.n_rebases_ = int(st["n_rebases"])
        eng.n_refits_ = int(st["n_refits"])
        eng.n_light_refits_ = int(st.get("n_light_refits", 0))  # absent before light refits
        eng._next_id = int(st["next_id"])
        eng._batch_counter = int(st["batch_counter"])
        eng._events_since_refit = int(st["events_since_refit"])
        eng._refit_spent = _counter(st, "refit_spent")  # absent before the budget
        # absent before the light refits' burst: a snapshot of an older engine starts it anew
        eng._light_burst_spent = _counter(st, "light_burst_spent")
        # absent before the settled floor of the shift test: as after a settled refit
        moved = st.get("moved_at_last_refit", False)
        if not isinstance(moved, bool):
            raise SnapshotFormatError(
                f"malformed engine snapshot: moved_at_last_refit = {moved!r}")
        eng._moved_at_last_refit = moved
        eng._decay = DecayClock(
            time_ref=None if st["time_ref"] is None else float(st["time_ref"]),
            now=None if st["clock"] is None else float(st["clock"]),
            refit_at=None if st["refit_clock"] is None else float(st["refit_clock"]),
        )
        eng.last_refit_time_ = (None if st["last_refit_time"] is None
                                else float(st["last_refit_time"]))
        eng.lineage_ = [dict(r) for r in manifest["lineage"]]
        _restore_family(eng, st)
        if d is None:
            return eng
        eng.n_features_ = int(d)
        eng.root_id_ = int(st["root_id"])
        nodes: dict[int, Node] = {}
        for meta in manifest["nodes"]:
            nid = int(meta["id"])
            sub = by_node.get(f"n{nid}", {})
            acc = MomentAccumulator.from_archive(meta["acc"], sub)
            res = Reservoir.from_archive(meta["reservoir"], sub)
            router = None
            if meta["absolute"] is not None:
                router = Router(np.array(sub["router_w"], dtype=np.float64),
                                np.array(sub["router_b"], dtype=np.float64),
                                bool(meta["absolute"]))
            nodes[nid] = Node(
                node_id=nid,
                parent=int(meta["parent"]),
                depth=int(meta["depth"]),
                acc=acc,
                reservoir=res,
                children=[int(c) for c in meta["children"]],
                router=router,
                discriminators=(np.array(sub["D"], dtype=np.float64)
                                if meta["has_D"] else None),
                quality={str(k): float(x) for k, x in meta["quality"].items()},
                fresh=float(meta["fresh"]),
                # absent before the moved-stream test (stream_shift): no shift until a refit
                arrived=_counter(meta, "arrived"),
                refit_rows=int(_counter(meta, "refit_rows")),
                backoff=int(meta["backoff"]),
                born_version=int(meta["born_version"]),
                stop_reason=read_stop_reason(meta),
                score=(LeafScore(np.array(sub["score_w"], dtype=np.float64),
                                 float(meta["score_b"]),
                                 read_share(meta.get("score_share")))
                       if "score_b" in meta else None),
            )
        if eng._family_pending and any(v.acc.s.any() for v in nodes.values()):
            raise SnapshotFormatError("malformed engine snapshot: family='auto' not taken "
                                      "yet, but the sums hold entries")
        if any(v.acc.family != eng.family_ for v in nodes.values()):
            raise SnapshotFormatError(f"malformed engine snapshot: sums of another family "
                                      f"than the engine's {eng.family_!r}")
        links = {nid: (n.parent, n.children) for nid, n in nodes.items()}
        if check_tree(links) != eng.root_id_:
            raise ValueError(f"root_id {eng.root_id_} is not the tree's root")
        for v in nodes.values():  # internal nodes hold their frozen C sparse (design §3)
            if v.children and isinstance(v.acc.C, np.ndarray):
                v.acc.C = SparsePacked.from_dense(v.acc.C)
        eng.nodes_ = nodes
        model = stored_model(manifest, arrays)
        if model is not None and model.family != eng.family_:
            raise SnapshotFormatError(f"malformed engine snapshot: the stored model is "
                                      f"{model.family!r}, the sums {eng.family_!r}")
        if model is None:
            eng._rebuild_model()
        else:  # the model it routed with: a resumed run publishes what an unbroken one does
            for nid, v in nodes.items():
                r, sc = model.nodes[nid].router, model.nodes[nid].score
                score = None if v.children else v.score
                if ((r is None) != (v.router is None)
                        or (r is not None and not r.same_as(v.router))
                        or (sc is None) != (score is None)
                        or (sc is not None and not sc.same_as(score))):
                    raise SnapshotFormatError(f"malformed engine snapshot: node {nid}: the "
                                              "stored model routes differently from the tree")
            eng.model_ = model
            eng._layout = leaf_layout(nodes, eng.root_id_)
        return eng
    except SnapshotFormatError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError,
            RecursionError) as exc:
        raise SnapshotFormatError(f"malformed engine snapshot: {exc!r}") from exc


def _restore_family(eng: StreamingHierarchy, state: Mapping[str, Any]) -> None:
    """``family="auto"``: the family the archived engine took from its first batch with an
    entry, or still none (then every event it learned was empty: checked on its sums)."""
    if eng.family != "auto":
        return
    taken = state.get("family")
    if taken is None:
        return
    eng.family_ = check_family(taken)
    eng._family_pending = False
