"""Batch commands: ``fit`` (file → snapshot), ``assign`` (snapshot + events → assignments),
``inspect`` (snapshot → tree with top features)."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from service.commands.streams import binary_stream
from service.config import LimitsSettings, ModelSettings
from service.events import EventDecoder, Rejection
from streammom.model import HierarchyModel
from streammom.serialization import (
    DEFAULT_MAX_BYTES,
    SnapshotFormatError,
    atomic_write_bytes,
    read_archive,
)

__all__ = [
    "LoadedSnapshot",
    "assign_file",
    "fit_file",
    "iter_batches",
    "load_snapshot",
]


@dataclass
class LoadedSnapshot:
    """A snapshot file opened for use: the engine (if any) and its model."""

    kind: str
    engine: Any | None
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
    manifest, arrays = read_archive(path, max_bytes=max_bytes)
    kind = str(manifest.get("kind"))
    try:
        if kind == "hierarchy-model":
            return LoadedSnapshot(kind, None, HierarchyModel.from_archive(manifest, arrays))
        if kind == "daemon-checkpoint":
            from service.checkpoint import decode_checkpoint

            del arrays  # decode_checkpoint reads the file again: never hold two copies
            engine = decode_checkpoint(path).engine()
            return LoadedSnapshot(kind, engine, engine.model_)
        from streammom import StreamingHierarchy

        engine = StreamingHierarchy.from_archive(manifest, arrays)
    except SnapshotFormatError:
        raise
    except (LookupError, TypeError, ValueError, AttributeError, OverflowError,
            RecursionError) as exc:
        raise SnapshotFormatError(f"invalid {kind} snapshot: {exc!r}") from exc
    return LoadedSnapshot(kind, engine, engine.model_)


def _open_text(path: str) -> IO[str]:
    if path == "-":
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
    return open(path, encoding="utf-8", errors="surrogateescape", newline="")


def iter_batches(
    path: str, *, batch_size: int, limits: LimitsSettings | None = None, fmt: str = "auto"
) -> Iterator[tuple[list[Any], dict[str, int], int]]:
    """Batches of valid events from a JSONL events file or a CSV of code rows.

    Yields ``(features_or_events, rejected_by_reason, bytes_read_so_far)``. For JSONL the first
    element is a list of validated events; for CSV a list of code lists (one row = one event).
    """
    if fmt == "auto":
        fmt = "csv" if path.lower().endswith(".csv") else "jsonl"
    decoder = EventDecoder(limits)
    rejected: dict[str, int] = {}
    nbytes = 0
    batch: list[Any] = []
    if fmt == "csv":
        with _open_text(path) as fh:
            for row in csv.reader(fh):
                nbytes += sum(len(c) + 1 for c in row)
                codes = [c.strip() for c in row if c.strip()]
                if not codes:
                    rejected["empty"] = rejected.get("empty", 0) + 1
                    continue
                batch.append(codes)
                if len(batch) >= batch_size:
                    yield batch, rejected, nbytes
                    batch, rejected = [], {}
    else:
        with binary_stream(path, "rb") as stream:
            for line in stream:
                nbytes += len(line)
                value = line.rstrip(b"\r\n")
                if not value.strip():
                    continue
                item = decoder.decode(value)
                if isinstance(item, Rejection):
                    rejected[item.reason] = rejected.get(item.reason, 0) + 1
                    continue
                batch.append(item)
                if len(batch) >= batch_size:
                    yield batch, rejected, nbytes
                    batch, rejected = [], {}
    if batch or rejected:
        yield batch, rejected, nbytes


def _features(items: list[Any]) -> list[Any]:
    return [it if isinstance(it, list) else it.features() for it in items]


def fit_file(
    path: str,
    output: str,
    model_cfg: ModelSettings,
    *,
    batch_size: int = 5000,
    limits: LimitsSettings | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Stream a file through a fresh engine (``learn`` per batch), refit, write its snapshot."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    from service.worker import build_engine

    engine = build_engine(model_cfg)
    binary = model_cfg.family == "bernoulli"
    total = os.path.getsize(path) if path != "-" else None
    rejected: dict[str, int] = {}
    n = 0
    columns = (TextColumn("[bold]fit"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[events]} events"))
    with Progress(*columns, disable=not progress, transient=False) as bar:
        task = bar.add_task("fit", total=total, events=0)
        for items, rej, nbytes in iter_batches(path, batch_size=batch_size, limits=limits):
            for k, v in rej.items():
                rejected[k] = rejected.get(k, 0) + v
            if items:
                X = engine.vocabulary.transform(_features(items), binary=binary)
                engine.learn(X)
                n += len(items)
            bar.update(task, completed=nbytes, events=n)
    engine.refit()
    atomic_write_bytes(output, engine.snapshot())
    model = engine.model_
    return {
        "events": n,
        "rejected": rejected,
        "model_version": int(engine.model_version_),
        "leaves": int(model.n_leaves),
        "depth": int(model.max_depth),
        "snapshot": str(output),
    }


def assign_file(snapshot: str, path: str, output: str, *, batch_size: int = 5000,
                limits: LimitsSettings | None = None) -> dict[str, int]:
    """Route every valid event of ``path`` with the snapshot's model; write assignments JSONL."""
    loaded = load_snapshot(snapshot)
    from streammom import Vocabulary

    if loaded.engine is not None:
        vocab = loaded.engine.vocabulary
        route = loaded.engine.assign
    else:
        names = loaded.model.feature_names
        if names is None:
            raise SnapshotFormatError("a bare model without feature names cannot map events")
        vocab = Vocabulary(tokens=[n for n in names if n])
        d = loaded.model.n_features
        model_route = loaded.model.route

        def route(X: Any) -> Any:
            X = X.tocsr()
            if X.shape[1] < d:  # a growing vocabulary's unused columns
                X.resize((X.shape[0], d))
            return model_route(X)

    binary = loaded.model.family == "bernoulli"
    counts = {"assigned": 0, "rejected": 0}
    with binary_stream(output, "wb") as out:
        for items, rej, _ in iter_batches(path, batch_size=batch_size, limits=limits):
            counts["rejected"] += sum(rej.values())
            if not items:
                continue
            X = vocab.transform(_features(items), binary=binary)
            routing = route(X)
            lines = []
            for i, rec in enumerate(routing.records()):
                item = items[i]
                ids = ({"event_id": item.id, "entity_id": getattr(item, "entity_id", None)}
                       if not isinstance(item, list) else {"row": counts["assigned"] + i})
                lines.append(json.dumps({**ids, **rec}, separators=(",", ":")).encode())
            out.write(b"\n".join(lines) + b"\n")
            counts["assigned"] += len(items)
    return counts
