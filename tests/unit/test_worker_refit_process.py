"""The worker with its refits in the helper process (``worker.refit_process``, the default):
the checkpointed state and every assignment are those of refits on the loop, byte for byte;
every checkpoint covers the events and outputs of its offsets; the helper's metrics are
exported."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from memory_harness import IN, fill_cohort, memory_worker, small_settings

from service.checkpoint import CheckpointStore
from service.memory_transport import MemoryBroker, MemorySink, MemorySource
from service.metrics import WorkerMetrics
from service.synthetic import generate_cohort
from service.transport import Record
from service.worker import Worker
from streammom.background_refits import HELD_EVENTS_BOUND

N = 6_000


def _run(tmp_path: Path, name: str, *, helper: bool, labels: str = "current"
         ) -> tuple[Worker, MemoryBroker]:
    settings = small_settings(tmp_path, name, worker={"refit_process": helper,
                                                      "refit_labels": labels},
                              checkpoint={"on_refit": True})
    broker = MemoryBroker()
    fill_cohort(broker, N)
    worker = memory_worker(settings, broker)
    assert worker.run() == 0
    return worker, broker


def test_the_helper_leaves_the_state_and_outputs_of_refits_on_the_loop(tmp_path: Path
                                                                       ) -> None:
    """``refit_labels="after_refit"``: state and assignments byte for byte."""
    inline, inline_broker = _run(tmp_path, "inline", helper=False)
    off, broker = _run(tmp_path, "helper", helper=True, labels="after_refit")
    assert off._refits is not None and off._refits.helper_refits >= 2
    # unset, the bound of held events is the one for events held whole (with their records)
    assert off._refits.max_held_events == HELD_EVENTS_BOUND["after_refit"]
    assert off._refits.helper_failures == 0
    # the final checkpoint holds the same bytes of state as the loop's own refits give
    stored = CheckpointStore(off.store.directory).load()
    assert stored is not None and stored.offsets == {(IN, 0): N}
    assert stored.engine().snapshot() == inline.engine.snapshot()
    assert off.engine.snapshot() == inline.engine.snapshot()
    # every event assigned once, with the label and model version refits on the loop give
    got = [(r.key, r.value, r.headers) for r in broker.records(off.topics.assignments)]
    want = [(r.key, r.value, r.headers)
            for r in inline_broker.records(inline.topics.assignments)]
    assert len(got) == N and got == want
    assert len({json.loads(v)["model_version"] for _, v, _ in got}) > 2
    for key in ("processed", "rejected", "assignments"):
        assert off.counters[key] == inline.counters[key]
    text = off.metrics.registry.get_sample_value
    assert text("streammom_refit_held_events") == 0.0
    assert text("streammom_refit_process_failures_total") == 0.0
    assert text("streammom_assignments_published_total") == N
    assert off.refits == inline.refits  # every collected refit logged and counted
    # the model published last is the final one (the shutdown settles the refits first)
    last = broker.records(off.topics.models)[-1]
    assert dict(last.headers)["model_version"] == str(off.engine.model_version_).encode()


def test_by_default_events_read_during_a_refit_are_assigned_at_once(tmp_path: Path) -> None:
    """``refit_labels="current"`` (the default): the state is still byte for byte that of
    refits on the loop; every event is assigned exactly once, by a model no newer than the
    one the loop's refits would have used for it."""
    inline, inline_broker = _run(tmp_path, "inline", helper=False)
    off, broker = _run(tmp_path, "helper", helper=True)
    assert off._refits is not None and off._refits.helper_refits >= 2
    # unset, the bound of held events is the one for events held as their codes alone
    assert off._refits.max_held_events == HELD_EVENTS_BOUND["current"]
    assert off.engine.snapshot() == inline.engine.snapshot()
    got = [json.loads(r.value) for r in broker.records(off.topics.assignments)]
    want = [json.loads(r.value) for r in inline_broker.records(inline.topics.assignments)]
    assert [v["event_id"] for v in got] == [v["event_id"] for v in want]  # once each, in order
    assert all(g["model_version"] <= w["model_version"] for g, w in zip(got, want, strict=True))
    assert any(g["model_version"] < w["model_version"] for g, w in zip(got, want, strict=True))
    for key in ("processed", "rejected", "assignments"):
        assert off.counters[key] == inline.counters[key]


@pytest.mark.parametrize("labels", ["current", "after_refit"])
def test_every_checkpoint_covers_its_offsets(tmp_path: Path, labels: str) -> None:
    """A checkpoint asked for while a refit runs waits for it: the events it held are in the
    state before the offsets past them are stored."""
    settings = small_settings(tmp_path, "ckpt", worker={"refit_process": True,
                                                        "refit_labels": labels},
                              checkpoint={"every_events": 250})
    broker = MemoryBroker()
    fill_cohort(broker, N)
    worker = memory_worker(settings, broker)
    worker.restore()
    assert worker._refits is not None
    seen_pending = False
    while True:
        records = worker.source.poll(250, 0.0)
        if not records:
            break
        worker.process_batch(records)
        seen_pending |= worker._refits.pending
        stored = CheckpointStore(worker.store.directory).load()
        if stored is not None:  # a checkpoint's engine learned, and its assignments were
            covered = stored.offsets[(IN, 0)]  # produced for, exactly its offsets' events
            assert stored.engine().n_events_seen_ == covered
            assert stored.counters["assignments"] == covered
            assert len(broker.records(worker.topics.assignments)) >= covered
    assert seen_pending
    assert worker.shutdown() == 0
    stored = CheckpointStore(worker.store.directory).load()
    assert stored is not None and stored.engine().n_events_seen_ == N


class _SourceIgnoringPause(MemorySource):
    """A control: a source on which ``pause`` does nothing."""

    def pause(self) -> None:
        pass


class _SourceFetchingUnaligned(MemorySource):
    """Polls of one and a half batches, as a Kafka fetch across partitions gives: a partial
    aligned block is pending in the worker whenever it pauses its input."""

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        return super().poll(max_records * 3 // 2, timeout_s)


def _bounded_run(tmp_path: Path, name: str, source: type[MemorySource]
                 ) -> tuple[Worker, MemoryBroker]:
    """The helper, labels ``current``, and a held-events bound below one batch: every refit
    sent to the helper reaches the bound at once."""
    settings = small_settings(tmp_path, name, worker={"refit_process": True,
                                                      "refit_labels": "current",
                                                      "refit_max_held_events": 1})
    broker = MemoryBroker()
    fill_cohort(broker, N)
    worker = Worker(settings, source(broker, IN), MemorySink(broker), metrics=WorkerMetrics(),
                    exit_when_idle=True)
    assert worker.run() == 0
    return worker, broker


def test_at_the_held_events_bound_the_input_pauses_and_the_loop_does_not_wait(
        tmp_path: Path) -> None:
    """Backpressure: while a refit runs in the helper with the held events at
    ``refit_max_held_events``, the worker pauses its input and keeps polling instead of
    waiting inside ``learn``; the state and the assignments are those of refits on the loop."""
    inline, inline_broker = _run(tmp_path, "inline", helper=False)
    paused, broker = _bounded_run(tmp_path, "paused", MemorySource)
    refits = paused._refits
    assert refits is not None and refits.helper_refits >= 2 and refits.helper_failures == 0
    assert refits.learn_waits == 0  # the loop never blocked on the helper
    text = paused.metrics.registry.get_sample_value
    assert text("streammom_input_paused_seconds_total") > 0
    assert text("streammom_input_paused") == 0.0 and not paused.source.paused
    assert paused.engine.snapshot() == inline.engine.snapshot()
    got = [json.loads(r.value)["event_id"] for r in broker.records(paused.topics.assignments)]
    want = [json.loads(r.value)["event_id"]
            for r in inline_broker.records(inline.topics.assignments)]
    assert got == want  # every event assigned once, in order
    # polls that leave a partial block pending: paused, it stays pending (an empty poll is
    # the pause, not the end of the input), and nothing waits either
    unaligned, unaligned_broker = _bounded_run(tmp_path, "unaligned", _SourceFetchingUnaligned)
    assert unaligned._refits is not None and unaligned._refits.helper_refits >= 2
    assert unaligned._refits.learn_waits == 0
    assert unaligned.engine.snapshot() == inline.engine.snapshot()
    assert [json.loads(r.value)["event_id"]
            for r in unaligned_broker.records(unaligned.topics.assignments)] == want
    # the control: a source that cannot pause makes learn wait for the helper
    deaf, _ = _bounded_run(tmp_path, "deaf", _SourceIgnoringPause)
    assert deaf._refits is not None and deaf._refits.learn_waits > 0
    assert deaf.engine.snapshot() == inline.engine.snapshot()


def test_a_block_longer_than_a_poll_waits_pending_not_inside_learn(tmp_path: Path) -> None:
    """Polls across partitions end aligned blocks at each partition's boundaries, so a block
    can be longer than a poll (here up to 375 records for polls of 375 and blocks of 250): the
    pause, sized for a poll, does not see it coming. Whether learning it would pass
    ``refit_max_held_events`` is checked before the block is learned; it then stays pending,
    the input paused, instead of waiting inside ``learn`` for the helper. Nothing is lost or
    learned twice. The bound, 300, lets a refit start with nothing held and no pause (a poll's
    250 fit), and a block of 375 after it would pass it."""
    settings = small_settings(tmp_path, "long", worker={"refit_process": True,
                                                        "refit_labels": "current",
                                                        "refit_max_held_events": 300})
    broker = MemoryBroker()
    broker.create_topic(IN, 3)
    for i, value in enumerate(generate_cohort(N, seed=1).event_bytes()):
        broker.append(IN, value, key=str(i).encode(), partition=i % 3)
    worker = Worker(settings, _SourceFetchingUnaligned(broker, IN), MemorySink(broker),
                    metrics=WorkerMetrics(), exit_when_idle=True)
    sizes: list[int] = []  # of every block the worker cuts
    split = worker.blocks.split

    def recording_split(records: list[Record]) -> list[list[Record]]:
        blocks = split(records)
        sizes.extend(map(len, blocks))
        return blocks

    worker.blocks.split = recording_split  # type: ignore[method-assign]
    assert worker.run() == 0
    refits = worker._refits
    assert refits is not None and refits.helper_refits >= 2 and refits.helper_failures == 0
    assert max(sizes) > settings.worker.batch_max_records  # the case: longer than a poll
    assert refits.learn_waits == 0
    assert worker.engine.n_events_seen_ == N
    ids = [json.loads(r.value)["event_id"] for r in broker.records(worker.topics.assignments)]
    assert len(ids) == N and len(set(ids)) == N


def test_records_held_back_across_a_rebalance_are_processed_as_taken(tmp_path: Path) -> None:
    """A rebalance that drops partitions between a batch's take and the hold-back of its later
    blocks: those blocks are learned as taken (the old behaviour, a wait), never put back
    among pending records the rebalance could not see — nothing is learned twice or lost."""
    settings = small_settings(tmp_path, "race")
    broker = MemoryBroker()
    fill_cohort(broker, 1_000)
    worker = memory_worker(settings, broker)
    worker.restore()
    records = worker.source.poll(1_000, 0.0)  # four aligned blocks of 250
    ready = worker.take_ready(records)
    assert len(ready) == 1_000 and not worker.blocks.pending

    def held_back_after_a_rebalance(rest: int, block: int, *, first: bool) -> bool:
        if not first:
            worker._on_revoke([(IN, 1)])  # another partition: the taken records stay ours
            return True  # as if the pause had come on
        return False

    worker._held_back = held_back_after_a_rebalance  # type: ignore[method-assign]
    assert worker.process_batch(ready)
    assert worker.counters["processed"] == 1_000 and not worker.blocks.pending
    assert worker.offsets[(IN, 0)] == 1_000
    # the control: without the rebalance the later blocks go back to the pending records
    control = memory_worker(small_settings(tmp_path, "control"), broker)
    control.restore()
    ready = control.take_ready(control.source.poll(1_000, 0.0))
    control._held_back = lambda rest, block, *, first: not first  # type: ignore[method-assign]
    assert control.process_batch(ready)
    assert control.counters["processed"] == 250 and len(control.blocks.pending) == 750
    assert control.offsets[(IN, 0)] == 250


def test_the_helper_runs_at_the_configured_niceness(tmp_path: Path) -> None:
    """``worker.refit_nice``: the helper the worker starts adds it to the worker's niceness."""
    settings = small_settings(tmp_path, "nice", worker={"refit_process": True, "refit_nice": 7})
    worker = memory_worker(settings, MemoryBroker())
    helper = worker._refit_process
    assert helper is not None and helper.nice == 7
    try:
        assert helper.wait_ready(120.0) and helper.pid is not None
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, helper.pid) == min(own + 7, 19)
    finally:
        helper.close()
