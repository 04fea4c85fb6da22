"""The one data path of the daemon and the batch commands (design §6).

::

    raw bytes ──EventDecoder──▶ events ──vocabulary──▶ CSR rows ──engine.learn / model.route──▶
    Routing ──assignment_values──▶ assignment bytes        engine.model_ ──▶ model message

The worker (:mod:`service.worker`: ``event_features`` and ``event_timestamps`` into
:class:`~streammom.background_refits.BackgroundRefits`, whose rows are those of
``events_matrix``), ``streammom fit`` / ``assign``
(:mod:`service.commands.offline`) and the report's event sample
(:mod:`service.commands.report`) all go through these functions, so an event means the same
thing — same features, same 0/1 or count encoding, same routing, same JSON — wherever it is
read. Pure functions: no Kafka, no files, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from service.events import Event
from streammom import CodeRollup, Vocabulary
from streammom.model import HierarchyModel, Routing

__all__ = [
    "MODEL_CONTENT_TYPE",
    "Assigner",
    "FeatureRows",
    "assignment_values",
    "encode_model_message",
    "event_features",
    "event_timestamps",
    "events_matrix",
    "model_assigner",
    "model_message_headers",
]

MODEL_CONTENT_TYPE = b"application/vnd.streammom.model+zip"
_encode_str: Callable[[str], str] = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]

#: One input item: a validated event, or a plain list of codes (a CSV row).
FeatureRows = Sequence[Event | list[str]]


class Assigner(Protocol):
    """What routes rows: ``StreamingHierarchy.assign`` or a bare model's router."""

    def __call__(self, X: sp.csr_array) -> Routing: ...


def event_features(items: FeatureRows) -> list[list[str] | dict[str, int]]:
    """The sparse features of every item (an event's codes / tokens / counts, or a code row)."""
    return [it if isinstance(it, list) else it.features() for it in items]


def events_matrix(vocabulary: Vocabulary, items: FeatureRows, *, binary: bool) -> sp.csr_array:
    """Rows of the model's feature space: 0/1 for Bernoulli models, counts for multinomial."""
    return vocabulary.transform(event_features(items), binary=binary)


def event_timestamps(events: Sequence[Event]) -> np.ndarray:
    """Event times (epoch seconds, float64) — the engine's clock when ``half_life_unit`` is
    ``seconds``."""
    return np.fromiter((e.ts for e in events), dtype=np.float64, count=len(events))


def model_assigner(model: HierarchyModel, rollup: CodeRollup | None = None
                   ) -> tuple[Vocabulary, Assigner]:
    """(vocabulary, router) of a bare model: its feature names are the vocabulary (codes are
    rolled up by ``rollup`` first, as the engine that learned the model did).

    A snapshot of a growing vocabulary may name fewer features than the model has columns
    (unused capacity); rows are widened to the model's width before routing.
    """
    names = model.feature_names
    if names is None:
        raise ValueError("a bare model without feature names cannot map events")
    vocab = Vocabulary(tokens=[n for n in names if n], rollup=rollup)
    d = model.n_features

    def route(X: sp.csr_array) -> Routing:
        X = X.tocsr()
        if X.shape[1] < d:
            X.resize((X.shape[0], d))
        return model.route(X)

    return vocab, route


def _id_fields(items: FeatureRows, first_row: int) -> Iterator[str]:
    """The JSON fields naming each item: event and entity id, or the row number of a code row."""
    enc = _encode_str
    for i, item in enumerate(items):
        if isinstance(item, list):
            yield f'"row":{first_row + i}'
        else:
            entity = getattr(item, "entity_id", None)
            yield (f'"event_id":{enc(item.id)},"entity_id":'
                   f'{enc(entity) if entity is not None else "null"}')


#: A margin's JSON text: 6 significant digits (printf ``%.6g``). Margins are log-odds of
#: routing decisions; the shortest round-trip ``repr`` of a float64 (17 digits) cost ~1 µs a
#: margin, the largest per-event cost of the daemon's own code (BENCHMARKS.md, issue #14).
MARGIN_FORMAT = "%.6g"


def assignment_values(items: FeatureRows, routing: Routing, *, first_row: int = 0) -> list[bytes]:
    """The JSON assignment of every item: ``Routing.records()`` with the margins to 6
    significant digits (:data:`MARGIN_FORMAT`).

    ``{"event_id", "entity_id", "leaf_id", "path", "margins", "model_version"}`` (a code row
    has ``"row"`` — its 0-based position in the input — in place of the two ids). Everything
    but the ids and the margins is fixed by the leaf, so each leaf gets one printf template
    and an event costs one ``%`` operation: O(n log n + n · depth) with no per-field Python calls.
    """
    leaves = routing.leaf_ids
    version = int(routing.model_version)
    uniq, inverse, counts = np.unique(leaves, return_inverse=True, return_counts=True)
    by_leaf = np.argsort(inverse, kind="stable")  # the rows of each leaf, one block a leaf
    ends = np.cumsum(counts)
    ids = list(_id_fields(items, first_row))
    out: list[bytes] = [b""] * len(ids)
    margins = routing.margins
    for leaf, end, count in zip(uniq.tolist(), ends.tolist(), counts.tolist(), strict=True):
        rows = by_leaf[end - count:end]
        path = routing.paths[rows[0]]
        depth = int((path >= 0).sum())
        template = (f'"leaf_id":{leaf},"path":[{",".join(map(str, path[:depth].tolist()))}],'
                    f'"margins":[{",".join([MARGIN_FORMAT] * (depth - 1))}],'
                    f'"model_version":{version}}}')
        for i, margin in zip(rows.tolist(), margins[rows, :depth - 1].tolist(), strict=True):
            out[i] = f"{{{ids[i]},{template % tuple(margin)}".encode()
    return out


def encode_model_message(model: HierarchyModel, max_bytes: int) -> tuple[bytes, str]:
    """The compact models-topic value of ``model`` and the dtype used.

    ``HierarchyModel.to_bytes(dtype=float32)`` is already a deflate-compressed archive. If it
    does not fit ``max_bytes`` the arrays are stored as float16 (≈ 3 significant digits: enough
    to route and to rank features, not to resume learning); if that does not fit either a
    :class:`ValueError` is raised (the caller logs it and keeps the model in the checkpoint).
    """
    for dtype, name in ((np.float32, "float32"), (np.float16, "float16")):
        data = model.to_bytes(dtype=dtype)
        if len(data) <= max_bytes:
            return data, name
    raise ValueError(f"model archive is {len(data)} bytes even as float16 > {max_bytes}")


def model_message_headers(
    *, version: int, epoch: int, worker_id: str, dtype: str, service_version: str
) -> list[tuple[str, bytes]]:
    """Headers of a models-topic message (design §6): within one key (``<name>/<worker id>``)
    ``(model_epoch, model_version)`` only grows."""
    return [
        ("model_version", str(version).encode()),
        ("model_epoch", str(epoch).encode()),
        ("worker_id", worker_id.encode()),
        ("content-type", MODEL_CONTENT_TYPE),
        ("dtype", dtype.encode()),
        ("service_version", service_version.encode()),
    ]

