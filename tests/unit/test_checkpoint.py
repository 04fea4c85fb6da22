"""Checkpoint files: round trip, validation, atomic replace, previous-file fallback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.checkpoint import (
    CheckpointStore,
    decode_checkpoint,
    encode_checkpoint,
)
from service.config import ModelSettings, build_engine
from service.synthetic import generate_cohort
from streammom.serialization import SnapshotFormatError, archive_bytes


def _engine(n: int = 600):
    eng = build_engine(ModelSettings(vocabulary_capacity=128, refit_every=200,
                                     min_split_weight=50.0, max_leaves=4, max_depth=2,
                                     reservoir_size=128))
    cohort = generate_cohort(n, seed=3)
    eng.learn(eng.vocabulary.transform(cohort.codes, binary=True))
    return eng


def test_round_trip_is_exact() -> None:
    eng = _engine()
    offsets = {("events", 0): 600, ("events", 3): 7}
    data = encode_checkpoint(eng, offsets, {"processed": 600, "rejected": {"schema": 2}},
                             created=123.0)
    ckpt = decode_checkpoint(data)
    assert ckpt.offsets == offsets
    assert ckpt.counters == {"processed": 600, "rejected": {"schema": 2}}
    assert ckpt.created == 123.0
    restored = ckpt.engine()
    assert restored.snapshot() == eng.snapshot()
    # deterministic bytes
    assert encode_checkpoint(eng, offsets, {"processed": 600, "rejected": {"schema": 2}},
                             created=123.0) == data


@pytest.mark.parametrize(
    "manifest",
    [
        {"kind": "hierarchy-model", "schema_version": 1},
        {"kind": "daemon-checkpoint", "schema_version": 99, "engine": {}},
        {"kind": "daemon-checkpoint", "schema_version": 1},
        {"kind": "daemon-checkpoint", "schema_version": 1, "engine": {},
         "offsets": {"t": {"0": -5}}},
        {"kind": "daemon-checkpoint", "schema_version": 1, "engine": {},
         "offsets": {"t": {"0": "12"}}},
        {"kind": "daemon-checkpoint", "schema_version": 1, "engine": {}, "counters": [1]},
    ],
)
def test_invalid_manifests_rejected(manifest: dict) -> None:
    with pytest.raises(SnapshotFormatError):
        decode_checkpoint(archive_bytes(manifest, {}))


def test_garbage_and_foreign_arrays_rejected() -> None:
    with pytest.raises(SnapshotFormatError):
        decode_checkpoint(b"not a zip at all")
    manifest = {"kind": "daemon-checkpoint", "schema_version": 1, "engine": {}}
    with pytest.raises(SnapshotFormatError):
        decode_checkpoint(archive_bytes(manifest, {"stray": np.zeros(2)}))


def test_store_keeps_previous_and_falls_back(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    assert store.load() is None
    eng = _engine(300)
    first = encode_checkpoint(eng, {("t", 0): 1}, created=1.0)
    second = encode_checkpoint(eng, {("t", 0): 2}, created=2.0)
    store.save(first)
    store.save(second)
    assert store.path.read_bytes() == second and store.previous.read_bytes() == first
    assert store.load().offsets == {("t", 0): 2}
    # no temp files left behind
    assert sorted(p.name for p in store.directory.iterdir()) == [
        "checkpoint.prev.smm", "checkpoint.smm"]
    # a corrupt current checkpoint falls back to the previous one
    store.path.write_bytes(second[: len(second) // 2])
    assert store.load().offsets == {("t", 0): 1}
    # crash between "rename current → previous" and "write current": only previous exists
    store.path.unlink()
    assert store.load().offsets == {("t", 0): 1}
    # nothing valid at all: refuse to start from scratch silently
    store.previous.write_bytes(b"garbage")
    with pytest.raises(SnapshotFormatError):
        store.load()
