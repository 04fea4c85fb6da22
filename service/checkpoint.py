"""Checkpoints: the engine state and the input offsets it belongs to, in ONE atomic file.

A checkpoint is a snapshot archive (:mod:`streammom.serialization`: JSON manifest + ``.npy``
arrays, deterministic, never pickled, CRC-checked by the ZIP layer) holding

* the engine archive (``StreamingHierarchy.to_archive``: sums, tree, reservoirs, RNG state and
  the vocabulary) — manifest under ``engine``, arrays prefixed ``engine__``;
* ``offsets`` ``{topic: {partition: next_offset}}`` — the first record NOT in the state;
* ``counters`` (events processed / rejected by reason / assignments published) so the metrics
  continue across restarts with the exactly-once counts of the state.

Why one file: the state and the input position must always be a consistent pair. The file is
written with :func:`~streammom.serialization.atomic_write` (temp file, fsync, rename,
fsync dir); the previous checkpoint is kept as ``checkpoint.prev.smm`` and used when the current
one is missing or unreadable. On start the worker restores it and seeks every assigned partition
to its offset, so no event is counted twice or lost — whatever happened between checkpoints is
simply replayed. Outputs of replayed events are produced again (at-least-once outputs, keyed by
entity id and stamped with the model version).

Fault policy (issue #12):

* **Damaged files.** :meth:`CheckpointStore.load` only returns a checkpoint whose engine was
  rebuilt successfully: anything that fails — unreadable file, bad ZIP/CRC/deflate data, bad
  manifest, arrays of inconsistent shapes — makes that file *invalid*; it is logged at error
  level (which file, why) and the previous checkpoint is tried (a warning says so). If files
  exist but none is valid, :class:`NoValidCheckpointError` is raised: starting from scratch
  would silently re-count the replayed input, so ``streammom run`` exits 2 instead.
* **Unusable directory.** :meth:`CheckpointStore.check_writable` (run at start-up) creates the
  directory and writes, fsyncs and removes a probe file, raising :class:`CheckpointDirError`
  (naming the directory and the OS error) so the daemon exits 2 before consuming anything.
  Write errors at checkpoint time are :class:`OSError` from :meth:`CheckpointStore.save`; the
  worker keeps running without committing and retries (see :mod:`service.worker`).
* **Orphan temp files** of a write killed mid-way are removed by
  :meth:`CheckpointStore.remove_stale_temp_files` at start-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from service.transport import Offsets, flatten_offsets, nest_offsets
from streammom import __version__
from streammom.serialization import (
    FrozenArchive,
    SnapshotFormatError,
    atomic_temp_files,
    atomic_write,
    frozen_archive,
    read_archive,
)

if TYPE_CHECKING:
    from streammom.engine import StreamingHierarchy

__all__ = [
    "CHECKPOINT_NAME",
    "PREVIOUS_NAME",
    "Checkpoint",
    "CheckpointDirError",
    "CheckpointStore",
    "NoValidCheckpointError",
    "decode_checkpoint",
    "encode_checkpoint",
    "freeze_checkpoint",
]

CHECKPOINT_KIND = "daemon-checkpoint"
CHECKPOINT_SCHEMA_VERSION = 1
CHECKPOINT_NAME = "checkpoint.smm"
PREVIOUS_NAME = "checkpoint.prev.smm"
ENGINE_PREFIX = "engine__"
_PROBE_NAME = ".streammom-write-probe"
_PROBE_BYTES = 4096

_log = logging.getLogger("streammom.checkpoint")


class NoValidCheckpointError(SnapshotFormatError):
    """Checkpoint files exist but none is valid (the message names each file and its error)."""


class CheckpointDirError(OSError):
    """The checkpoint directory cannot be created or written (the message names both)."""


@dataclass
class Checkpoint:
    """A decoded checkpoint: engine archive, offsets, counters and metadata."""

    engine_manifest: dict[str, Any]
    engine_arrays: dict[str, np.ndarray]
    offsets: Offsets
    counters: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    service_version: str = ""
    path: Path | None = None
    """The file it was loaded from (None when decoded from bytes)."""
    _rebuilt: StreamingHierarchy | None = field(default=None, init=False, repr=False,
                                                compare=False)

    def engine(self) -> StreamingHierarchy:
        """The :class:`streammom.StreamingHierarchy` of this checkpoint.

        Rebuilt from the archive on every call, except that the first call after
        :meth:`CheckpointStore.load` hands over the engine ``load`` already rebuilt to validate
        the file (once: two calls never return the same instance).
        """
        if self._rebuilt is not None:
            engine, self._rebuilt = self._rebuilt, None
            return engine
        from streammom.engine import StreamingHierarchy  # here: model-only reads never load it

        return StreamingHierarchy.from_archive(self.engine_manifest, self.engine_arrays)


def encode_checkpoint(
    engine: StreamingHierarchy,
    offsets: Mapping[tuple[str, int], int],
    counters: Mapping[str, Any] | None = None,
    *,
    created: float | None = None,
) -> bytes:
    """Serialise ``engine`` (a StreamingHierarchy) + ``offsets`` + ``counters`` to bytes."""
    return freeze_checkpoint(engine, offsets, counters, created=created).to_bytes()


def freeze_checkpoint(
    engine: StreamingHierarchy,
    offsets: Mapping[tuple[str, int], int],
    counters: Mapping[str, Any] | None = None,
    *,
    created: float | None = None,
) -> FrozenArchive:
    """The checkpoint of the state as it is now, to be encoded later on any thread: the
    manifest is serialised and the engine's arrays copied now
    (:func:`streammom.serialization.frozen_archive`), so the loop can go on learning while a
    background thread writes the file (:meth:`~service.checkpoint_policy.CheckpointPolicy.begin`),
    member by member. Its bytes are exactly :func:`encode_checkpoint`'s."""
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
    out_arrays = {f"{ENGINE_PREFIX}{k}": v for k, v in arrays.items()}
    # no deflate (issue #14): the second-order sums are stored sparse when they are
    # (moments.packed_archive), and what remains (tracked third-order sums, reservoirs) is
    # dense floats that deflate would halve at ~5x the cost of writing them
    return frozen_archive(out_manifest, out_arrays, compresslevel=0)


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
        k[len(ENGINE_PREFIX) :]: v for k, v in arrays.items() if k.startswith(ENGINE_PREFIX)
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

    def save(self, data: bytes | FrozenArchive) -> int:
        """Write ``data`` (bytes, or a frozen checkpoint streamed to the file member by member)
        atomically as the current checkpoint, keeping the previous one; the bytes written.

        A crash between the two steps leaves only ``checkpoint.prev.smm``, which :meth:`load`
        falls back to; a crash inside :func:`atomic_write` leaves at most a temp file
        (removed at the next start by :meth:`remove_stale_temp_files`). A write error is
        raised as :class:`OSError` and leaves the same state as such a crash: the last good
        checkpoint is ``checkpoint.prev.smm`` (a retry does not rotate again while the current
        file is missing, so it is kept).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            os.replace(self.path, self.previous)
        if isinstance(data, FrozenArchive):
            return atomic_write(self.path, data.write)
        return atomic_write(self.path, lambda fh: fh.write(data))

    def load(self) -> Checkpoint | None:
        """The newest *valid* checkpoint — its engine already rebuilt — or None if there is none.

        A file that cannot be read, decoded or rebuilt into an engine (any exception: bad CRC,
        corrupt deflate data, truncation, arrays of inconsistent shapes …) is logged at error
        level and skipped; falling back to ``checkpoint.prev.smm`` is logged as a warning. The
        returned checkpoint's :attr:`~Checkpoint.path` names the file actually used.

        Raises :class:`NoValidCheckpointError` if checkpoint files exist but none is valid
        (starting from scratch would silently double-count the replayed input).
        """
        errors: list[str] = []
        for path in (self.path, self.previous):
            try:
                if not path.exists():
                    continue
                ckpt = decode_checkpoint(path)
                ckpt._rebuilt = ckpt.engine()
            except Exception as exc:  # any failure to read or rebuild means "invalid"
                reason = _describe(exc)
                _log.error("invalid checkpoint file; ignoring it",
                           extra={"path": str(path), "error": reason})
                errors.append(f"{path}: {reason}")
                continue
            ckpt.path = path
            if path == self.previous:
                _log.warning(
                    "falling back to the previous checkpoint: the events since it are replayed",
                    extra={"path": str(path), "skipped": errors or [f"{self.path}: missing"]},
                )
            return ckpt
        if errors:
            raise NoValidCheckpointError(
                f"no valid checkpoint in {self.directory}: " + "; ".join(errors))
        return None

    def check_writable(self) -> None:
        """Start-up check: the directory can be created and a probe file written, fsynced and
        removed; else :class:`CheckpointDirError` naming the directory and the OS error.

        Catches a missing mount, a path under a regular file, a read-only or full file system
        before any input is consumed (rather than at the first checkpoint).
        """
        probe = self.directory / _PROBE_NAME
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(probe, "wb") as fh:
                fh.write(b"\0" * _PROBE_BYTES)
                fh.flush()
                os.fsync(fh.fileno())
            probe.unlink()
        except OSError as exc:
            with contextlib.suppress(OSError):
                probe.unlink()
            raise CheckpointDirError(
                f"checkpoint directory {self.directory} is not usable: {_describe(exc)}"
            ) from exc

    def remove_stale_temp_files(self) -> tuple[int, int]:
        """Remove the temp files of checkpoint writes killed mid-way; ``(files, bytes)``.

        Only names of the exact temp form of :func:`atomic_write` for
        ``checkpoint.smm`` / ``checkpoint.prev.smm`` in this directory are touched (see
        :func:`~streammom.serialization.atomic_temp_files`). Call it at start-up only, before
        the first write. Failures to remove are logged, never raised.
        """
        files = size = 0
        for target in (self.path, self.previous):
            try:
                stale = atomic_temp_files(target)
            except OSError as exc:
                _log.warning("cannot list the checkpoint directory",
                             extra={"dir": str(self.directory), "error": _describe(exc)})
                return files, size
            for tmp in stale:
                try:
                    n = tmp.lstat().st_size
                    tmp.unlink()
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    _log.warning("cannot remove a stale temp file",
                                 extra={"path": str(tmp), "error": _describe(exc)})
                    continue
                files += 1
                size += n
        if files:
            _log.warning("removed stale temp files of an interrupted checkpoint write",
                         extra={"dir": str(self.directory), "files": files, "bytes": size})
        return files, size


def _describe(exc: BaseException) -> str:
    """One line: ``"<type>: <message>"`` (the message alone for our own format errors)."""
    message = " ".join(str(exc).split()) or repr(exc)
    if isinstance(exc, SnapshotFormatError | CheckpointDirError):
        return message
    kind = type(exc)
    module = kind.__module__.rsplit(".", 1)[-1]
    name = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    return f"{name}: {message}"
