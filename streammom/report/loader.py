"""Load what a report shows: a model plus facts about where it came from.

Two archive kinds are accepted (both JSON manifest + ``.npy`` members, never pickle):

* ``"hierarchy-model"`` — a published :class:`~streammom.model.HierarchyModel`;
* ``"streaming-hierarchy"`` — a streaming-engine snapshot. Its routing model (stored beside
  the sums, :func:`streammom.engine_manifest.stored_model`), lineage of splits, number of events
  seen and last refit time are read without inflating a single moment sum
  (:func:`routing_members`; the manifest and the tree are still checked); a snapshot written
  before models were stored in it is restored with
  :meth:`streammom.engine.StreamingHierarchy.from_archive` instead.

Anything else raises :class:`~streammom.serialization.SnapshotFormatError` with a message that
says what was found and what was expected.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streammom.engine_manifest import (
    ENGINE_READS_SCHEMAS,
    ENGINE_SCHEMA_VERSION,
    check_engine_archive,
    stored_model,
)
from streammom.model import HierarchyModel
from streammom.serialization import (
    DEFAULT_MAX_BYTES,
    SnapshotFormatError,
    check_manifest,
    read_archive,
)

__all__ = ["ACCEPTED_KINDS", "from_engine", "from_engine_archive", "load_model", "model_info",
           "routing_members", "snapshot_path"]

ACCEPTED_KINDS = ("hierarchy-model", "streaming-hierarchy")
_NODE_SUMS = re.compile(r"^(?:[a-z]+__)?n\d+_")


def snapshot_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a :class:`~pathlib.Path` if it names a file; :class:`IsADirectoryError` or
    :class:`FileNotFoundError` (naming it) otherwise."""
    source = Path(path)
    if source.is_dir():
        raise IsADirectoryError(f"snapshot is a directory: {source}")
    if not source.is_file():
        raise FileNotFoundError(f"snapshot not found: {source}")
    return source


def routing_members(name: str) -> bool:
    """True for the archive arrays a model-only reader needs: everything but an engine
    node's sums (``n12_C``, ``engine__n12_T``, …).

    >>> [routing_members(n) for n in ("means", "model.means", "n3_C", "engine__n3_s")]
    [True, True, False, False]
    """
    return _NODE_SUMS.match(name) is None


def load_model(
    source: bytes | str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[HierarchyModel, dict[str, Any]]:
    """Read a model archive or an engine snapshot; return ``(model, info)``.

    ``info`` is a JSON-safe dict: ``kind``, ``source``, ``model_version``, ``method``,
    ``family``, ``n_features``, ``n_nodes``, ``n_leaves``, ``max_depth``, ``total_weight``,
    ``events_seen`` (int or ``None``), ``last_refit_time`` (epoch seconds or ``None``),
    ``lineage`` (list of dicts, oldest first) and ``metadata``.

    The archive is read once, bounded by ``max_bytes`` and validated as in
    :func:`~streammom.serialization.read_archive` and the ``from_archive`` loaders.
    Raises :class:`FileNotFoundError` for a missing path, :class:`IsADirectoryError` for a
    directory and :class:`~streammom.serialization.SnapshotFormatError` for anything that is
    not a valid one of the :data:`ACCEPTED_KINDS`.
    """
    raw: bytes | Path
    if isinstance(source, bytes | bytearray | memoryview):
        raw, label = bytes(source), "<bytes>"
    else:
        raw = snapshot_path(source)
        label = str(raw)
    try:
        manifest, arrays = read_archive(raw, max_bytes=max_bytes, select=routing_members)
    except SnapshotFormatError as exc:
        raise SnapshotFormatError(f"{label}: not a streammom snapshot ({exc})") from exc
    kind = manifest.get("kind")
    if manifest.get("format") not in (None, "streammom") or kind not in ACCEPTED_KINDS:
        raise SnapshotFormatError(
            f"{label}: unsupported archive kind {kind!r} (format {manifest.get('format')!r}); "
            f"expected one of {', '.join(repr(k) for k in ACCEPTED_KINDS)}"
        )
    if kind == "hierarchy-model":
        try:
            model = HierarchyModel.from_archive(manifest, arrays)
        except SnapshotFormatError as exc:
            raise SnapshotFormatError(f"{label}: {exc}") from exc
        except ValueError as exc:  # tree validation
            raise SnapshotFormatError(f"{label}: invalid hierarchy model: {exc}") from exc
        return model, model_info(model, kind=kind, source=label)
    stored = from_engine_archive(manifest, arrays, source=label)
    if stored is not None:
        return stored
    try:
        manifest, arrays = read_archive(raw, max_bytes=max_bytes)  # an older snapshot: all sums
    except SnapshotFormatError as exc:
        raise SnapshotFormatError(f"{label}: not a streammom snapshot ({exc})") from exc
    try:
        from streammom.engine import StreamingHierarchy  # lazy: the report needs no engine
    except ImportError as exc:  # pragma: no cover - the engine ships with the library
        raise SnapshotFormatError(
            f"{label}: a streaming-engine snapshot needs streammom.engine ({exc})"
        ) from exc
    try:  # from the arrays already read: reading the archive again would hold it twice
        engine = StreamingHierarchy.from_archive(manifest, arrays)
    except SnapshotFormatError as exc:
        raise SnapshotFormatError(f"{label}: {exc}") from exc
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError) as exc:
        raise SnapshotFormatError(f"{label}: invalid streaming-engine snapshot: {exc}") from exc
    try:
        return from_engine(engine, source=label)
    except ValueError as exc:
        raise SnapshotFormatError(f"{label}: {exc}") from exc


def from_engine(engine: Any, *, source: str = "<engine>") -> tuple[HierarchyModel, dict[str, Any]]:
    """``(model, info)`` of a live :class:`~streammom.engine.StreamingHierarchy`.

    This is what the daemon passes to :func:`streammom.report.write_report` after a refit.
    Reads ``model_``, ``lineage_``, ``n_events_seen_``, ``last_refit_time_`` and ``vocabulary``
    when present; a model without feature names is given the vocabulary's.
    """
    model = getattr(engine, "model_", None)
    if model is None:
        raise ValueError("the streaming engine has no model yet (no refit)")
    if model.feature_names is None:
        names = _vocabulary_names(getattr(engine, "vocabulary", None), model.n_features)
        if names is not None:
            model = model.replace(feature_names=names)
    info = model_info(model, kind="streaming-hierarchy", source=source)
    events = getattr(engine, "n_events_seen_", None)
    refit = getattr(engine, "last_refit_time_", None)
    if events is not None:
        info["events_seen"] = int(events)
    if refit is not None and math.isfinite(float(refit)):
        info["last_refit_time"] = float(refit)
    lineage = getattr(engine, "lineage_", None)
    if lineage is not None:
        info["lineage"] = [_record(r) for r in lineage]
    return model, info


def from_engine_archive(
    manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray], *, source: str
) -> tuple[HierarchyModel, dict[str, Any]] | None:
    """``(model, info)`` of an engine archive from its stored routing model and manifest —
    what :func:`from_engine` gives for the engine it holds, without its sums; ``None`` for an
    archive written before the model was stored in it (restore the engine instead)."""
    if manifest.get("model") is None:
        return None
    try:
        check_manifest(manifest, kind="streaming-hierarchy", schema_version=ENGINE_SCHEMA_VERSION,
                       what="engine snapshot", also_reads=ENGINE_READS_SCHEMAS)
        check_engine_archive(manifest, {}, sums=False)
        model = stored_model(manifest, arrays)
        assert model is not None
        state = manifest["state"]
        info = model_info(model, kind="streaming-hierarchy", source=source)
        info["events_seen"] = int(state["n_events_seen"])
        refit = state.get("last_refit_time")
        if refit is not None and math.isfinite(float(refit)):
            info["last_refit_time"] = float(refit)
        info["lineage"] = [_record(r) for r in manifest.get("lineage") or []]
    except SnapshotFormatError as exc:
        raise SnapshotFormatError(f"{source}: {exc}") from exc
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError) as exc:
        raise SnapshotFormatError(f"{source}: invalid streaming-engine snapshot: {exc}") from exc
    return model, info


def model_info(
    model: HierarchyModel, *, kind: str = "hierarchy-model", source: str = "<model>"
) -> dict[str, Any]:
    """The ``info`` dict of a bare model (metadata may carry events seen, refit time, lineage)."""
    meta = dict(model.metadata)
    events = _first(meta, ("n_events_seen", "events_seen", "n_events", "n_samples"))
    refit = _first(meta, ("last_refit_time", "refit_time", "fitted_at"))
    lineage = meta.get("lineage")
    return {
        "kind": kind,
        "source": source,
        "model_version": model.version,
        "method": model.method,
        "family": model.family,
        "n_features": model.n_features,
        "n_nodes": len(model.nodes),
        "n_leaves": model.n_leaves,
        "max_depth": model.max_depth,
        "total_weight": float(model.root.weight),
        "events_seen": int(events) if isinstance(events, int | float) else None,
        "last_refit_time": float(refit)
        if isinstance(refit, int | float) and math.isfinite(float(refit))
        else None,
        "lineage": [_record(r) for r in lineage] if isinstance(lineage, list) else [],
        "metadata": _json_safe(meta),
    }


def _first(meta: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if meta.get(key) is not None:
            return meta[key]
    return None


def _vocabulary_names(vocab: Any, n_features: int) -> list[str] | None:
    """Feature names from an engine vocabulary (several plausible shapes), padded to d."""
    if vocab is None:
        return None
    names: Any = None
    for attr in ("feature_names", "names", "tokens", "features"):
        value = getattr(vocab, attr, None)
        if callable(value):
            try:
                value = value()
            except TypeError:
                value = None
        if value is not None:
            names = value
            break
    if names is None and isinstance(vocab, Sequence) and not isinstance(vocab, str):
        names = vocab
    if names is None:
        return None
    out = [str(n) for n in list(names)[:n_features]]
    out += [f"#{i}" for i in range(len(out), n_features)]
    return out


def _record(record: Any) -> dict[str, Any]:
    """A lineage record as a JSON-safe dict (dataclass, namedtuple, mapping or object)."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        data: Any = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    elif hasattr(record, "_asdict"):
        data = record._asdict()
    elif isinstance(record, Mapping):
        data = dict(record)
    elif hasattr(record, "__dict__"):
        data = {k: v for k, v in vars(record).items() if not k.startswith("_")}
    else:
        data = {"event": str(record)}
    return {str(k): _json_safe(v) for k, v in data.items()}


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [_json_safe(v) for v in items]
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
