"""Batch commands: ``fit`` (file → snapshot) and ``assign`` (snapshot + events → assignments).

Both read events the way the daemon does (:class:`~service.events.EventDecoder`, one JSON
event per line, or a CSV of code rows) and go through the daemon's data path
(:mod:`service.pipeline`): same features, same encoding, same assignment JSON.
"""

from __future__ import annotations

import csv
import io
import os
import sys
from collections.abc import Iterator
from typing import IO, Any

from service.commands.progress import byte_progress
from service.commands.streams import binary_stream
from service.config import LimitsSettings, ModelSettings, build_engine
from service.events import Event, EventDecoder, Rejection
from service.pipeline import (
    Assigner,
    FeatureRows,
    assignment_values,
    events_matrix,
    model_assigner,
)
from service.snapshots import load_snapshot
from streammom.report.charts import SampleItem
from streammom.serialization import SnapshotFormatError, atomic_write_bytes

__all__ = ["assign_file", "event_sample_items", "fit_file", "iter_batches", "iter_events"]


def _open_text(path: str) -> IO[str]:
    if path == "-":
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
    return open(path, encoding="utf-8", errors="surrogateescape", newline="")


def _jsonl_lines(path: str) -> Iterator[tuple[int, bytes | None]]:
    """(bytes read, line without its end) of a JSONL file (``-``: stdin; ``.gz`` read
    transparently); ``None`` for a blank line, which is not an event."""
    with binary_stream(path, "rb") as stream:
        for line in stream:
            value = line.rstrip(b"\r\n")
            yield len(line), value if value.strip() else None


def iter_events(path: str, limits: LimitsSettings | None = None) -> Iterator[Event | Rejection]:
    """Every non-blank line of a JSONL events file decoded as the daemon decodes a message:
    an event, or why it was rejected."""
    decoder = EventDecoder(limits)
    for _, value in _jsonl_lines(path):
        if value is not None:
            yield decoder.decode(value)


def event_sample_items(path: str | os.PathLike[str]) -> Iterator[SampleItem]:
    """``(event id, features)`` of every event of a JSONL file, ``None`` for a rejected line —
    the input of the report's heatmap sample (:func:`streammom.report.charts.sample_events`)."""
    for item in iter_events(os.fspath(path)):
        yield None if isinstance(item, Rejection) else (item.id, item.features())


def iter_batches(
    path: str, *, batch_size: int, limits: LimitsSettings | None = None, fmt: str = "auto"
) -> Iterator[tuple[FeatureRows, dict[str, int], int]]:
    """Batches of valid events from a JSONL events file or a CSV of code rows.

    Yields ``(items, rejected_by_reason, bytes_read_so_far)``: validated events (JSONL) or
    code lists (CSV, one row = one event).
    """
    if fmt == "auto":
        fmt = "csv" if path.lower().endswith(".csv") else "jsonl"
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
        decoder = EventDecoder(limits)
        for size, value in _jsonl_lines(path):
            nbytes += size
            if value is None:
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
    engine = build_engine(model_cfg)
    binary = model_cfg.family == "bernoulli"
    total = os.path.getsize(path) if path != "-" else None
    rejected: dict[str, int] = {}
    n = 0
    with byte_progress("fit", total, progress) as update:
        for items, rej, nbytes in iter_batches(path, batch_size=batch_size, limits=limits):
            for k, v in rej.items():
                rejected[k] = rejected.get(k, 0) + v
            if items:
                engine.learn(events_matrix(engine.vocabulary, items, binary=binary))
                n += len(items)
            update(nbytes, n)
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
                limits: LimitsSettings | None = None, progress: bool = False) -> dict[str, int]:
    """Route every valid event of ``path`` with the snapshot's model; write assignments JSONL
    (the daemon's assignment values, :func:`service.pipeline.assignment_values`)."""
    loaded = load_snapshot(snapshot)
    route: Assigner
    if loaded.engine is not None:
        vocab, route = loaded.engine.vocabulary, loaded.engine.assign
    else:
        try:
            vocab, route = model_assigner(loaded.model)
        except ValueError as exc:
            raise SnapshotFormatError(str(exc)) from exc
    binary = loaded.model.family == "bernoulli"
    counts = {"assigned": 0, "rejected": 0}
    total = os.path.getsize(path) if path != "-" else None
    with binary_stream(output, "wb") as out, byte_progress("assign", total, progress) as update:
        for items, rej, nbytes in iter_batches(path, batch_size=batch_size, limits=limits):
            counts["rejected"] += sum(rej.values())
            if items:
                routing = route(events_matrix(vocab, items, binary=binary))
                lines = assignment_values(items, routing, first_row=counts["assigned"])
                out.write(b"\n".join(lines) + b"\n")
                counts["assigned"] += len(items)
            update(nbytes, counts["assigned"])
    return counts
