"""Checkpoints written off the loop (issue #14 item 3; docs/design.md §6 "checkpoints"): the
state is copied on the loop, encoded and written by one background thread, and its offsets are
committed only once the write is durable; revocations and shutdown write on the loop."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from memory_harness import IN, fill_cohort, memory_worker, small_settings

import service.checkpoint as checkpoint_module
from service.checkpoint import (
    CheckpointStore,
    decode_checkpoint,
    encode_checkpoint,
    freeze_checkpoint,
)
from service.memory_transport import MemoryBroker


class _SlowDisk:
    """``atomic_write`` that holds every write until ``release`` is set (or fails)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.release = threading.Event()
        self.started = threading.Event()
        self.full = False
        self.writes = 0

    def __call__(self, path: Path, write: Any) -> int:
        self.started.set()
        assert self.release.wait(30), "the test never released the write"
        self.writes += 1
        if self.full:
            raise OSError(28, "No space left on device")
        return self.real(path, write)


def _background_worker(tmp_path: Path, broker: MemoryBroker, **checkpoint: Any):
    settings = small_settings(tmp_path, checkpoint={"background": True, **checkpoint})
    worker = memory_worker(settings, broker)
    worker.restore()
    return worker


def _batch(worker) -> None:
    assert worker.process_batch(worker.source.poll(250, 0.0))


def _first_checkpoint_handed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
                                  full: bool = False) -> tuple[_SlowDisk, MemoryBroker, Any]:
    """A background worker on 3,000 events whose disk holds every write (or, ``full``,
    fails it at once), after the 1,000 records that make the first checkpoint due."""
    disk = _SlowDisk(checkpoint_module.atomic_write)
    if full:
        disk.full = True
        disk.release.set()
    monkeypatch.setattr(checkpoint_module, "atomic_write", disk)
    broker = MemoryBroker()
    fill_cohort(broker, 3000)
    worker = _background_worker(tmp_path, broker)
    for _ in range(4):  # 1,000 records: the checkpoint is due, copied and handed over
        _batch(worker)
    return disk, broker, worker


def test_the_loop_goes_on_while_the_write_is_in_flight_and_commits_what_it_covers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk, broker, worker = _first_checkpoint_handed_over(tmp_path, monkeypatch)
    assert disk.started.wait(30) and worker.checkpoints.in_flight
    seen_at_copy = worker.engine.n_events_seen_
    for _ in range(4):  # the loop learns on while the disk holds the write
        _batch(worker)
    assert worker.offsets == {(IN, 0): 2000}
    assert broker.commit_log == [] and not worker.store.path.exists()
    assert worker.checkpoints.in_flight and not worker.checkpoints.due()
    disk.release.set()
    worker.checkpoints._write.future.result(30)  # durable now; the next loop step commits
    disk.release.clear()  # and holds the next write
    disk.started.clear()
    _batch(worker)
    assert broker.commit_log == [("streammom", {(IN, 0): 1000})]
    assert worker.last_checkpoint_offsets == {(IN, 0): 1000}
    assert worker.checkpoints.records_since == 1250  # what came after the copy still counts
    # 1,250 ≥ every_events: the same step hands the next copy over; its write has moved the
    # first checkpoint to the previous slot when it reaches the (held) disk
    assert disk.started.wait(30) and worker.checkpoints.in_flight
    ckpt = decode_checkpoint(worker.store.previous)
    assert ckpt.offsets == {(IN, 0): 1000}  # the copy's offsets, not the loop's
    assert ckpt.engine().n_events_seen_ == seen_at_copy
    disk.release.set()
    assert worker.shutdown() == 0  # the final checkpoint covers everything
    assert decode_checkpoint(worker.store.path).offsets == {(IN, 0): 2250}
    assert broker.commit_log[-1] == ("streammom", {(IN, 0): 2250})


def test_a_failed_background_write_commits_nothing_and_is_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk, broker, worker = _first_checkpoint_handed_over(tmp_path, monkeypatch, full=True)
    worker.checkpoints._write.future.exception(30)
    _batch(worker)  # the failure is handled on the loop
    assert worker.metrics.checkpoint_failures._value.get() == 1
    assert broker.commit_log == [] and not worker.readiness()[0]
    assert worker.checkpoints.records_since == 1250  # nothing was covered
    disk.full = False
    worker.checkpoints.retry_at = 0.0  # the backoff has passed
    _batch(worker)  # due again (≥ every_events): a new copy goes to the writer
    worker._finish_checkpoint(wait=True)
    assert broker.commit_log == [("streammom", {(IN, 0): 1500})]
    assert worker.readiness()[1]["checkpoint"] is True


def test_a_revocation_is_written_on_the_loop(tmp_path: Path) -> None:
    broker = MemoryBroker()
    fill_cohort(broker, 1000)
    worker = _background_worker(tmp_path, broker)
    _batch(worker)
    worker._on_revoke([(IN, 0)])
    worker._maybe_checkpoint()
    assert not worker.checkpoints.in_flight  # written synchronously, already committed
    assert broker.commit_log == [("streammom", {(IN, 0): 250})]


def test_a_frozen_checkpoint_is_the_state_when_it_was_taken(tmp_path: Path) -> None:
    """The copy is the state at the instant it was taken, and the writer thread streams it to
    the file member by member: the file is byte for byte the encoded checkpoint of then."""
    broker = MemoryBroker()
    fill_cohort(broker, 1000)
    worker = _background_worker(tmp_path, broker)
    for _ in range(2):
        _batch(worker)
    engine, offsets = worker.engine, dict(worker.offsets)
    before = encode_checkpoint(engine, offsets, {"n": 1}, created=1.0)
    frozen = freeze_checkpoint(engine, offsets, {"n": 1}, created=1.0)
    for _ in range(2):
        _batch(worker)  # the sums change in place
    assert frozen.to_bytes() == before != encode_checkpoint(engine, offsets, {"n": 1},
                                                            created=1.0)
    store = CheckpointStore(tmp_path / "streamed")
    assert store.save(frozen) == len(before)
    assert store.path.read_bytes() == before


def test_start_up_objects_leave_the_collectors_generations(tmp_path: Path) -> None:
    """service.worker.settle_heap: after restore the start-up heap is frozen (gc.freeze), so
    the cyclic collector scans only what the loop allocates, and its thresholds are the
    daemon's (a batch's objects die before a collection sees them)."""
    import gc

    from service.worker import GC_THRESHOLDS

    gc.unfreeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    broker = MemoryBroker()
    fill_cohort(broker, 10)
    _background_worker(tmp_path, broker)
    try:
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == GC_THRESHOLDS != (700, 10, 10)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_a_checkpoint_on_the_loop_finishes_the_one_in_flight_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk, broker, worker = _first_checkpoint_handed_over(tmp_path, monkeypatch)
    assert disk.started.wait(30) and worker.checkpoints.in_flight
    _batch(worker)
    disk.release.set()
    assert worker.checkpoint()  # waits for the background write, then writes its own
    assert broker.commit_log == [("streammom", {(IN, 0): 1000}), ("streammom", {(IN, 0): 1250})]
    assert disk.writes == 2 and worker.last_checkpoint_offsets == {(IN, 0): 1250}
