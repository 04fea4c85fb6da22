"""Opening the files the daemon and the batch commands write: model archives, engine snapshots
and daemon checkpoints — all untrusted input, bounded and validated on read."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.checkpoint import CHECKPOINT_KIND, ENGINE_PREFIX, decode_checkpoint
from streammom.model import HierarchyModel
from streammom.report import from_engine, load_model
from streammom.report.loader import from_engine_archive, routing_members, snapshot_path
from streammom.serialization import DEFAULT_MAX_BYTES, SnapshotFormatError, read_archive

if TYPE_CHECKING:
    from streammom.engine import StreamingHierarchy

__all__ = ["LoadedSnapshot", "load_for_report", "load_snapshot"]


@dataclass
class LoadedSnapshot:
    """A snapshot file opened for use: the engine (if any) and its model."""

    kind: str
    engine: StreamingHierarchy | None
    model: HierarchyModel


def load_snapshot(
    path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> LoadedSnapshot:
    """Open an engine snapshot, a daemon checkpoint or a bare model archive.

    The file is untrusted: :func:`~streammom.serialization.read_archive` bounds what it may
    expand to (``max_bytes``, the declared member sizes) and the loaders validate the tree and
    the arrays against the manifest. Raises :class:`SnapshotFormatError` with a one-line
    reason (without the path) for anything that is not a valid snapshot, and
    :class:`OSError` if the file cannot be read.
    """
    from streammom.engine import StreamingHierarchy  # here: model-only reads never load it

    manifest, arrays = read_archive(path, max_bytes=max_bytes)
    kind = str(manifest.get("kind"))
    try:
        if kind == "hierarchy-model":
            return LoadedSnapshot(kind, None, HierarchyModel.from_archive(manifest, arrays))
        if kind == "daemon-checkpoint":
            del arrays  # decode_checkpoint reads the file again: never hold two copies
            engine = decode_checkpoint(path).engine()
            return LoadedSnapshot(kind, engine, engine.model_)
        engine = StreamingHierarchy.from_archive(manifest, arrays)
    except SnapshotFormatError:
        raise
    except (LookupError, TypeError, ValueError, AttributeError, OverflowError,
            RecursionError) as exc:
        raise SnapshotFormatError(f"invalid {kind} snapshot: {exc!r}") from exc
    return LoadedSnapshot(kind, engine, engine.model_)


def load_for_report(
    path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[HierarchyModel, dict[str, Any]]:
    """``(model, info)`` of a model archive, an engine snapshot or a daemon checkpoint.

    Model-only: the routing model stored in an engine snapshot or checkpoint is read without
    inflating a single moment sum (:func:`streammom.report.loader.routing_members`), so
    ``inspect`` and ``report`` cost what the tree costs, not what the state costs. Files
    written before models were stored beside the sums are loaded whole
    (:func:`load_snapshot`). Raises :class:`OSError` for a missing, unreadable or directory
    path and :class:`SnapshotFormatError` (naming the path) for anything that is not a valid
    snapshot.
    """
    source = snapshot_path(path)
    label = str(source)
    try:
        manifest, _ = read_archive(source, max_bytes=max_bytes, select=lambda name: False)
        if manifest.get("kind") != CHECKPOINT_KIND:  # a model archive or an engine snapshot
            return load_model(source, max_bytes=max_bytes)
        manifest, arrays = read_archive(source, max_bytes=max_bytes, select=routing_members)
        engine_manifest = manifest.get("engine")
        if isinstance(engine_manifest, dict):
            stored = from_engine_archive(
                engine_manifest, {k.removeprefix(ENGINE_PREFIX): v for k, v in arrays.items()},
                source=label)
            if stored is not None:
                return stored
        loaded = load_snapshot(source, max_bytes=max_bytes)  # written before models were stored
    except (KeyError, TypeError, IndexError, AttributeError, OverflowError,
            RecursionError) as exc:
        raise SnapshotFormatError(f"{source}: invalid snapshot: {exc!r}") from exc
    except SnapshotFormatError as exc:
        if str(exc).startswith(label):
            raise
        raise SnapshotFormatError(f"{source}: not a streammom snapshot ({exc})") from exc
    assert loaded.engine is not None
    try:
        return from_engine(loaded.engine, source=label)
    except ValueError as exc:
        raise SnapshotFormatError(f"{source}: {exc}") from exc
