"""Checkpoints: the engine state and the input offsets it belongs to, in ONE atomic file.

A checkpoint is a snapshot archive (:mod:`streammom.serialization`: JSON manifest + ``.npy``
arrays, deterministic, never pickled, CRC-checked by the ZIP layer) holding

* the engine archive (``StreamingHierarchy.to_archive``: sums, tree, reservoirs, RNG state and
  the vocabulary) — manifest under ``engine``, arrays prefixed ``engine__``;
* ``offsets`` ``{topic: {partition: next_offset}}`` — the first record NOT in the state;
* ``counters`` (events processed / rejected by reason / assignments published) so the metrics
  continue across restarts with the exactly-once counts of the state.

Why one file: the state and the input position must always be a consistent pair. The file is
written with :func:`~streammom.serialization.atomic_write_bytes` (temp file, fsync, rename,
fsync dir); the previous checkpoint is kept as ``checkpoint.prev.smm`` and used when the current
one is missing or unreadable. On start the worker restores it and seeks every assigned partition
to its offset, so no event is counted twice or lost — whatever happened between checkpoints is
simply replayed. Outputs of replayed events are produced again (at-least-once outputs, keyed by
entity id and stamped with the model version).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from service.transport import Offsets, flatten_offsets, nest_offsets
from streammom import __version__
from streammom.serialization import (
    SnapshotFormatError,
    archive_bytes,
    atomic_write_bytes,
    read_archive,
)

__all__ = [
    "CHECKPOINT_NAME",
    "PREVIOUS_NAME",
    "Checkpoint",
    "CheckpointStore",
    "decode_checkpoint",
    "encode_checkpoint",
]

CHECKPOINT_KIND = "daemon-checkpoint"
CHECKPOINT_SCHEMA_VERSION = 1
CHECKPOINT_NAME = "checkpoint.smm"
PREVIOUS_NAME = "checkpoint.prev.smm"
_ENGINE_PREFIX = "engine__"

_log = logging.getLogger("streammom.checkpoint")


@dataclass
class Checkpoint:
    """A decoded checkpoint: engine archive, offsets, counters and metadata."""

    engine_manifest: dict[str, Any]
    engine_arrays: dict[str, np.ndarray]
    offsets: Offsets
    counters: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    service_version: str = ""

    def engine(self) -> Any:
        """Rebuild the :class:`streammom.StreamingHierarchy` of this checkpoint."""
        from streammom import StreamingHierarchy

        return StreamingHierarchy.from_archive(self.engine_manifest, self.engine_arrays)


def encode_checkpoint(
    engine: Any,
    offsets: Mapping[tuple[str, int], int],
    counters: Mapping[str, Any] | None = None,
    *,
    created: float | None = None,
) -> bytes:
    """Serialise ``engine`` (a StreamingHierarchy) + ``offsets`` + ``counters`` to bytes."""
    manifest, arrays = engine.to_archive()
    out_manifest = {
        "format": "streammom",
        "kind": CHECKPOINT_KIND,
        "schema_version": CHECKPOINT_SCHEMA_VERSION,
        "service_version": __version__,
        "created": float(time.time() if created is None else created),
        "offsets": nest_offsets(offsets),
        "counters": dict(counters or {}),
        "engine": manifest,
    }
    out_arrays = {f"{_ENGINE_PREFIX}{k}": v for k, v in arrays.items()}
    return archive_bytes(out_manifest, out_arrays)


def decode_checkpoint(data: bytes | str | os.PathLike[str]) -> Checkpoint:
    """Parse and validate checkpoint bytes (or a path); raises :class:`SnapshotFormatError`."""
    manifest, arrays = read_archive(data)
    if manifest.get("kind") != CHECKPOINT_KIND:
        raise SnapshotFormatError(f"not a daemon checkpoint: kind={manifest.get('kind')!r}")
    if manifest.get("schema_version") != CHECKPOINT_SCHEMA_VERSION:
        raise SnapshotFormatError(
            f"unsupported checkpoint schema version {manifest.get('schema_version')!r}"
        )
    engine_manifest = manifest.get("engine")
    if not isinstance(engine_manifest, dict):
        raise SnapshotFormatError("checkpoint has no engine manifest")
    try:
        offsets = flatten_offsets(manifest.get("offsets") or {})
    except (ValueError, TypeError, AttributeError) as exc:
        raise SnapshotFormatError(f"bad checkpoint offsets: {exc}") from exc
    counters = manifest.get("counters") or {}
    if not isinstance(counters, dict):
        raise SnapshotFormatError("checkpoint counters must be an object")
    engine_arrays = {
        k[len(_ENGINE_PREFIX) :]: v for k, v in arrays.items() if k.startswith(_ENGINE_PREFIX)
    }
    if len(engine_arrays) != len(arrays):
        raise SnapshotFormatError("checkpoint has unexpected arrays")
    return Checkpoint(
        engine_manifest=engine_manifest,
        engine_arrays=engine_arrays,
        offsets=offsets,
        counters=counters,
        created=float(manifest.get("created", 0.0)),
        service_version=str(manifest.get("service_version", "")),
    )


class CheckpointStore:
    """The checkpoint files of one worker in ``directory`` (current + previous)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / CHECKPOINT_NAME
        self.previous = self.directory / PREVIOUS_NAME

    def save(self, data: bytes) -> Path:
        """Write ``data`` atomically as the current checkpoint, keeping the previous one.

        A crash between the two steps leaves only ``checkpoint.prev.smm``, which :meth:`load`
        falls back to; a crash inside :func:`atomic_write_bytes` leaves the old file intact.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            os.replace(self.path, self.previous)
        atomic_write_bytes(self.path, data)
        return self.path

    def load(self) -> Checkpoint | None:
        """The newest readable checkpoint, or None if there is none.

        Raises :class:`SnapshotFormatError` only if checkpoint files exist but none is valid
        (starting from scratch would silently double-count the replayed input).
        """
        errors: list[str] = []
        for path in (self.path, self.previous):
            if not path.exists():
                continue
            try:
                ckpt = decode_checkpoint(path)
            except (SnapshotFormatError, OSError) as exc:
                _log.error("unreadable checkpoint", extra={"path": str(path), "error": str(exc)})
                errors.append(f"{path}: {exc}")
                continue
            if path == self.previous:
                _log.warning("using the previous checkpoint", extra={"path": str(path)})
            return ckpt
        if errors:
            raise SnapshotFormatError("no valid checkpoint: " + "; ".join(errors))
        return None
