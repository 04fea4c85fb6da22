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
from dataclasses import dataclass
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
from streammom.describe import EMPTY_LEAVES
from streammom.model import describe_refusals
from streammom.report.charts import SampleItem
from streammom.serialization import SnapshotFormatError, atomic_write_bytes

__all__ = ["CsvLayout", "InputFormatError", "assign_file", "event_sample_items", "fit_file",
           "iter_batches", "iter_events", "rejection_warning"]


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


def _decoded_lines(path: str, limits: LimitsSettings | None
                   ) -> Iterator[tuple[int, Event | Rejection | None]]:
    """(bytes read, the line decoded as the daemon decodes a message) of a JSONL file;
    ``None`` for a blank line, which is not an event."""
    decoder = EventDecoder(limits)
    for size, value in _jsonl_lines(path):
        yield size, None if value is None else decoder.decode(value)


def iter_events(path: str, limits: LimitsSettings | None = None) -> Iterator[Event | Rejection]:
    """Every non-blank line of a JSONL events file decoded as the daemon decodes a message:
    an event, or why it was rejected."""
    for _, item in _decoded_lines(path, limits):
        if item is not None:
            yield item


def event_sample_items(path: str | os.PathLike[str]) -> Iterator[SampleItem]:
    """``(event id, features)`` of every event of a JSONL file, ``None`` for a rejected line —
    the input of the report's heatmap sample (:func:`streammom.report.charts.sample_events`)."""
    for item in iter_events(os.fspath(path)):
        yield None if isinstance(item, Rejection) else (item.id, item.features())


class InputFormatError(ValueError):
    """The input file is not in the format its name or options say (a user mistake)."""


@dataclass(frozen=True)
class CsvLayout:
    """How a CSV/TSV file holds codes.

    * ``column=None`` (default): every non-empty cell of a row is a code, one row an event,
      no header row;
    * ``column`` a header name or a 0-based index: only that column holds codes (a header row
      comes first when it is a name); ``separator`` splits the cell into several codes
      (``"I10;E11.9"``). Other columns (patient ids, dates) are ignored.

    ``delimiter`` separates the cells (``,``; a ``.tsv`` file uses a tab).
    """

    column: str | int | None = None
    separator: str | None = None
    delimiter: str = ","


def _csv_events(path: str, layout: CsvLayout) -> Iterator[tuple[int, list[str]]]:
    """(bytes read, codes) per data row of a CSV/TSV file (see :class:`CsvLayout`)."""
    with _open_text(path) as fh:
        rows = csv.reader(fh, delimiter=layout.delimiter)
        index: int | None = None
        if isinstance(layout.column, str):
            header = next(rows, [])
            names = [h.strip() for h in header]
            if layout.column not in names:
                raise InputFormatError(f"{path}: no column {layout.column!r} in the header "
                                       f"(columns: {', '.join(names) or 'none'})")
            index = names.index(layout.column)
        elif isinstance(layout.column, int):
            index = layout.column
        for row in rows:
            size = sum(len(c) + 1 for c in row)
            cells = row if index is None else row[index : index + 1]
            if layout.separator:
                cells = [part for cell in cells for part in cell.split(layout.separator)]
            yield size, [c.strip() for c in cells if c.strip()]


def _is_csv(path: str) -> bool:
    return path.lower().endswith((".csv", ".tsv", ".csv.gz", ".tsv.gz"))


def _file_layout(path: str, layout: CsvLayout | None) -> CsvLayout:
    """``layout`` (default: every cell a code) with a tab delimiter for a ``.tsv`` file."""
    layout = layout or CsvLayout()
    if path.lower().endswith((".tsv", ".tsv.gz")) and layout.delimiter == ",":
        return CsvLayout(layout.column, layout.separator, "\t")
    return layout


def csv_layout_warning(path: str, layout: CsvLayout | None) -> str | None:
    """A one-line warning when a CSV read row by row (every cell a code) looks like it has an
    id column — its first cells all differ, as patient ids do — so ids (and a header) would
    become features; ``None`` otherwise. Reads at most 200 rows."""
    if path == "-" or not _is_csv(path) or (layout is not None and layout.column is not None):
        return None
    delimiter = _file_layout(path, layout).delimiter
    with _open_text(path) as fh:
        rows = [row for _, row in zip(range(200), csv.reader(fh, delimiter=delimiter),
                                      strict=False) if len(row) > 1]
    firsts = [row[0].strip() for row in rows]
    if len(rows) < 20 or len(set(firsts)) < 0.9 * len(firsts):
        return None
    return (f"warning: the first column of {path} looks like ids (its values all differ) and "
            "every cell of a row is read as a code, a header row too: give the column of "
            f"codes with --csv-column (header name or index), e.g. --csv-column {len(rows[0]) - 1}")


def iter_batches(
    path: str, *, batch_size: int, limits: LimitsSettings | None = None, fmt: str = "auto",
    csv_layout: CsvLayout | None = None,
) -> Iterator[tuple[FeatureRows, dict[str, int], int]]:
    """Batches of valid events from a JSONL events file or a CSV/TSV of codes.

    Yields ``(items, rejected_by_reason, bytes_read_so_far)``: validated events (JSONL) or
    code lists (CSV/TSV, one row = one event, :class:`CsvLayout`). ``fmt="auto"`` reads
    ``.csv`` and ``.tsv`` files as CSV/TSV, anything else as JSONL.
    """
    if fmt == "auto":
        fmt = "csv" if _is_csv(path) else "jsonl"
    lines: Iterator[tuple[int, Any]]
    if fmt == "csv":
        lines = ((size, codes or Rejection("empty", "no codes"))
                 for size, codes in _csv_events(path, _file_layout(path, csv_layout)))
    else:
        lines = _decoded_lines(path, limits)
    rejected: dict[str, int] = {}
    nbytes = 0
    batch: list[Any] = []
    for size, item in lines:
        nbytes += size
        if item is None:
            continue
        if isinstance(item, Rejection):
            rejected[item.reason] = rejected.get(item.reason, 0) + 1
            continue
        batch.append(item)
        if len(batch) >= batch_size:
            yield batch, rejected, nbytes
            batch, rejected = [], {}
    if batch or rejected:
        yield batch, rejected, nbytes


def rejection_warning(path: str, accepted: int, rejected: dict[str, int]) -> str | None:
    """A one-line warning when most of the input was rejected (a wrong format, not a few bad
    events), naming the reasons and the likely cause; ``None`` otherwise."""
    bad = sum(rejected.values())
    if bad < 10 or bad <= accepted:
        return None
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(rejected.items(), key=lambda kv: -kv[1]))
    hint = ("it does not look like JSONL events (one JSON object per line, see "
            "'streammom schema'); a CSV/TSV of codes needs a .csv/.tsv name"
            if rejected.get("invalid_json", 0) * 2 > bad else "see 'streammom schema'")
    return f"warning: {bad} of {bad + accepted} events of {path} were rejected ({reasons}): {hint}"


def fit_file(
    path: str,
    output: str,
    model_cfg: ModelSettings,
    *,
    batch_size: int = 5000,
    limits: LimitsSettings | None = None,
    progress: bool = True,
    csv_layout: CsvLayout | None = None,
) -> dict[str, Any]:
    """Stream a file through a fresh engine (``learn`` per batch), refit, write its snapshot."""
    warning = csv_layout_warning(path, csv_layout)
    if warning:
        print(warning, file=sys.stderr)
    engine = build_engine(model_cfg)
    binary = model_cfg.family == "bernoulli"
    total = os.path.getsize(path) if path != "-" else None
    rejected: dict[str, int] = {}
    n = 0
    with byte_progress("fit", total, progress) as update:
        for items, rej, nbytes in iter_batches(path, batch_size=batch_size, limits=limits,
                                               csv_layout=csv_layout):
            for k, v in rej.items():
                rejected[k] = rejected.get(k, 0) + v
            if items:
                engine.learn(events_matrix(engine.vocabulary, items, binary=binary))
                n += len(items)
            update(nbytes, n)
    warning = rejection_warning(path, n, rejected)
    if warning:
        print(warning, file=sys.stderr)
    engine.refit()
    atomic_write_bytes(output, engine.snapshot())
    model = engine.model_
    refused = model.refused_splits(engine.max_leaves)
    if refused:  # never a silent collapse
        print(f"warning: {model.n_leaves} of {engine.max_leaves} leaves: splits refused "
              f"({describe_refusals(refused)})", file=sys.stderr)
    if empty := model.empty_leaves():
        print(f"warning: {len(empty)} of the {model.n_leaves} leaves are empty: {EMPTY_LEAVES}",
              file=sys.stderr)
    return {
        "events": n,
        "rejected": rejected,
        "model_version": int(engine.model_version_),
        "leaves": int(model.n_leaves),
        "depth": int(model.max_depth),
        "stopped": model.stopped_leaves(),
        "empty_leaves": len(empty),
        "snapshot": str(output),
    }


def assign_file(snapshot: str, path: str, output: str, *, batch_size: int = 5000,
                limits: LimitsSettings | None = None, progress: bool = False,
                csv_layout: CsvLayout | None = None) -> dict[str, int]:
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
    reasons: dict[str, int] = {}
    total = os.path.getsize(path) if path != "-" else None
    with binary_stream(output, "wb") as out, byte_progress("assign", total, progress) as update:
        for items, rej, nbytes in iter_batches(path, batch_size=batch_size, limits=limits,
                                               csv_layout=csv_layout):
            counts["rejected"] += sum(rej.values())
            for k, v in rej.items():
                reasons[k] = reasons.get(k, 0) + v
            if items:
                routing = route(events_matrix(vocab, items, binary=binary))
                lines = assignment_values(items, routing, first_row=counts["assigned"])
                out.write(b"\n".join(lines) + b"\n")
                counts["assigned"] += len(items)
            update(nbytes, counts["assigned"])
    warning = rejection_warning(path, counts["assigned"], reasons)
    if warning:
        print(warning, file=sys.stderr)
    return counts
