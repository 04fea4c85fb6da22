"""The one data path (service/pipeline.py): the daemon, ``fit``/``assign`` and the report read
events the same way and write the same assignment JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from service.commands.offline import assign_file, event_sample_items, fit_file, iter_events
from service.config import ModelSettings, build_engine
from service.events import EventDecoder, Rejection
from service.pipeline import (
    MARGIN_FORMAT,
    assignment_values,
    encode_model_message,
    event_timestamps,
    events_matrix,
    model_assigner,
)
from service.synthetic import generate_cohort
from streammom.model import HierarchyModel

_SMALL = {"vocabulary_capacity": 128, "refit_every": 1000, "min_split_weight": 100.0,
          "max_leaves": 4, "max_depth": 2}


def _learned(n: int = 3000, seed: int = 9):
    engine = build_engine(ModelSettings(**_SMALL))
    events = EventDecoder().decode_many(list(generate_cohort(n, seed=seed).event_bytes()))
    assert not any(isinstance(e, Rejection) for e in events)
    for _ in range(2):  # a batch of validated events in ONE engine call, as the worker does
        X = events_matrix(engine.vocabulary, events, binary=True)
        routing = engine.learn(X, timestamps=event_timestamps(events))
    assert routing.leaf_ids.max() > 0  # a real tree
    return engine, events, routing


def test_assignment_values_match_routing_records() -> None:
    _, events, routing = _learned()
    got = [json.loads(v) for v in assignment_values(events, routing)]
    want = [{"event_id": e.id, "entity_id": e.entity_id, **r}
            for e, r in zip(events, routing.records(), strict=True)]
    assert [{**g, "margins": None} for g in got] == [{**w, "margins": None} for w in want]
    for g, w in zip(got, want, strict=True):  # margins to 6 significant digits
        assert len(g["margins"]) == len(w["margins"])
        np.testing.assert_allclose(g["margins"], w["margins"], rtol=5e-6, atol=0)
        assert g["margins"] == [float(MARGIN_FORMAT % m) for m in w["margins"]]


def test_code_rows_are_numbered_from_first_row() -> None:
    engine, events, _ = _learned()
    rows = [list(e.features()) for e in events[:5]]
    routing = engine.assign(events_matrix(engine.vocabulary, rows, binary=True))
    got = [json.loads(v) for v in assignment_values(rows, routing, first_row=10)]
    assert [g["row"] for g in got] == [10, 11, 12, 13, 14]
    assert [g["leaf_id"] for g in got] == routing.leaf_ids.tolist()


def test_assign_file_writes_the_daemons_values(tmp_path: Path) -> None:
    """``streammom assign`` with an engine snapshot and with a bare model archive gives, byte
    for byte, what the daemon's encoder gives for the same events."""
    engine, events, _ = _learned()
    events_path = tmp_path / "events.jsonl"
    events_path.write_bytes(b"\n".join(generate_cohort(3000, seed=9).event_bytes()) + b"\n")
    expected = assignment_values(events, engine.assign(
        events_matrix(engine.vocabulary, events, binary=True)))
    snap = tmp_path / "engine.smm"
    snap.write_bytes(engine.snapshot())
    out = tmp_path / "a.jsonl"
    assert assign_file(str(snap), str(events_path), str(out), batch_size=700) == {
        "assigned": 3000, "rejected": 0}
    assert out.read_bytes().splitlines() == expected
    model_path = tmp_path / "model.smm"
    model_path.write_bytes(engine.model_.to_bytes())
    out2 = tmp_path / "b.jsonl"
    assign_file(str(model_path), str(events_path), str(out2))
    assert out2.read_bytes().splitlines() == expected


def test_model_assigner_widens_rows_to_the_model() -> None:
    engine, events, _ = _learned()
    model = HierarchyModel.from_bytes(engine.model_.to_bytes())
    vocab, route = model_assigner(model)
    X = events_matrix(vocab, events, binary=True)
    assert X.shape[1] <= model.n_features
    np.testing.assert_array_equal(route(X).leaf_ids, engine.assign(
        events_matrix(engine.vocabulary, events, binary=True)).leaf_ids)


def test_fit_file_learns_what_the_daemon_learns(tmp_path: Path) -> None:
    """Same events, same settings, same batches → the same snapshot bytes as the daemon's
    rows (``events_matrix``) learned batch by batch."""
    cohort = generate_cohort(2000, seed=3)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(cohort.event_bytes()) + b"\n")
    out = tmp_path / "fit.smm"
    fit_file(str(path), str(out), ModelSettings(**_SMALL), batch_size=500, progress=False)
    engine = build_engine(ModelSettings(**_SMALL))
    events = EventDecoder().decode_many(list(cohort.event_bytes()))
    for start in range(0, len(events), 500):
        X = events_matrix(engine.vocabulary, events[start:start + 500], binary=True)
        engine.learn(X)
    engine.refit()
    assert out.read_bytes() == engine.snapshot()


def test_report_sample_reads_events_as_the_daemon_does(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(
        b'{"type":"encounter","id":"a","entity_id":"p","ts":0,"codes":["I10","E11.9"]}\n'
        b"not json\n\n"
        b'{"type":"encounter","id":"b","ts":0,"codes":["I10"]}\n'  # no entity_id
        b'{"type":"encounter","id":"c","entity_id":"p","ts":0,"codes":[]}\n')
    decoded = list(iter_events(str(path)))
    assert not isinstance(decoded[0], Rejection)
    assert [d.reason for d in decoded[1:]] == ["invalid_json", "schema", "empty"]
    assert list(event_sample_items(path)) == [("a", ["I10", "E11.9"]), None, None, None]


def test_model_message_falls_back_to_float16_then_refuses() -> None:
    engine, _, _ = _learned()
    model = engine.model_
    full = len(model.to_bytes(dtype=np.float32))
    half = len(model.to_bytes(dtype=np.float16))
    assert encode_model_message(model, full)[1] == "float32"
    assert encode_model_message(model, full - 1)[1] == "float16"
    with pytest.raises(ValueError, match="float16"):
        encode_model_message(model, half - 1)
