"""Scale-out roles on the in-memory transport: frames, ingest workers, the learner, take-over.

The same checks on a real broker, with processes killed, are in
``tests/integration/test_daemon_scale_out.py``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from memory_harness import IN, memory_worker, small_settings

from service.config import Settings
from service.frames import FrameError, decode_frame, encode_frame
from service.ingest import IngestWorker
from service.learner import LearnerWorker
from service.memory_transport import MemoryBroker, MemoryReader, MemorySink, MemorySource
from service.metrics import WorkerMetrics
from service.model_follower import ModelFollower
from service.state_topic import TopicCheckpointStore
from service.synthetic import generate_cohort
from streammom.engine_merge import named_root_sums

FRAMES, MODELS, STATE = "streammom.frames", "streammom.models", "streammom.learner-state"
ASSIGNMENTS, DLQ = "streammom.assignments", "streammom.events.dlq"


def _settings(tmp_path: Path, name: str = "ckpt") -> Settings:
    # checkpoint.background as shipped: the roles write their checkpoints on the loop anyway
    return small_settings(tmp_path, name, model={"vocabulary_capacity": 4096},
                          checkpoint={"every_events": 700, "background": True})


def _fill(broker: MemoryBroker, n: int, partitions: int = 4, bad_every: int = 37) -> int:
    """``n`` encounters over ``partitions`` input partitions (by key), a malformed one every
    ``bad_every``; returns the number of valid events."""
    broker.create_topic(IN, partitions)
    valid = 0
    for i, value in enumerate(generate_cohort(n, seed=3).event_bytes()):
        if i % bad_every == 5:
            broker.append(IN, b'{"type": "encounter", "codes": 7}', key=f"k{i}".encode())
        else:
            broker.append(IN, value, key=f"k{i}".encode())
            valid += 1
    return valid


def _ingest(settings: Settings, broker: MemoryBroker) -> IngestWorker:
    return IngestWorker(settings, MemorySource(broker, IN), MemorySink(broker),
                        models=ModelFollower(MemoryReader(broker, MODELS), settings.model.name),
                        metrics=WorkerMetrics(), exit_when_idle=True)


def _learner(settings: Settings, broker: MemoryBroker) -> LearnerWorker:
    sink = MemorySink(broker)
    state = TopicCheckpointStore(sink, lambda: MemoryReader(broker, STATE), STATE,
                                 name=settings.model.name, chunk_bytes=16 * 1024)
    return LearnerWorker(settings, MemorySource(broker, FRAMES, group="g.learner"), sink,
                         state=state,
                         models=ModelFollower(MemoryReader(broker, MODELS), settings.model.name),
                         metrics=WorkerMetrics(), exit_when_idle=True)


def _one_process_sums(tmp_path: Path, broker: MemoryBroker) -> tuple:
    single = memory_worker(_settings(tmp_path, "single"), broker)
    assert single.run() == 0
    return named_root_sums(single.engine)


def _assignment_ids(broker: MemoryBroker) -> list[str]:
    return [json.loads(r.value)["event_id"] for r in broker.records(ASSIGNMENTS)]


# ---------------------------------------------------------------------------- frames
def test_frame_round_trip_and_since() -> None:
    value = encode_frame("in", 2, 100, 110, [100, 104, 109], [1.0, 2.0, 3.5],
                         [["a", "b"], {"c": 2}, []])
    frame = decode_frame(value)
    assert (frame.source, frame.start, frame.end) == (("in", 2), 100, 110)
    assert frame.offsets.tolist() == [100, 104, 109]
    assert frame.since(105).offsets.tolist() == [109]
    assert frame.since(105).start == 105
    assert frame.since(110).features == []


@pytest.mark.parametrize("value, message", [
    (b"not json", "not JSON"),
    (b"[]", "exactly the fields"),
    (encode_frame("in", 0, 10, 12, [10, 13], [1.0, 2.0], [["a"], ["b"]]), "increase strictly"),
    (encode_frame("in", 0, 10, 12, [11, 11], [1.0, 2.0], [["a"], ["b"]]), "increase strictly"),
    (encode_frame("in", 0, 10, 12, [10], [1.0, 2.0], [["a"]]), "differ in length"),
    (encode_frame("in", 0, 12, 10, [], [], []), "increase strictly"),
    (json.dumps({"v": 2, "topic": "in", "partition": 0, "start": 0, "end": 0, "offsets": [],
                 "ts": [], "features": []}).encode(), "schema version"),
    (json.dumps({"v": 1, "topic": "in", "partition": -1, "start": 0, "end": 0, "offsets": [],
                 "ts": [], "features": []}).encode(), "non-negative integer"),
    (None, "empty"),
])
def test_bad_frames_are_refused(value: bytes | None, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode_frame(value)


# ---------------------------------------------------------------------------- roles
def test_ingest_and_learner_learn_what_one_process_learns(tmp_path: Path) -> None:
    broker = MemoryBroker()
    valid = _fill(broker, 3000)
    settings = _settings(tmp_path)
    ingest = _ingest(settings, broker)
    assert ingest.run() == 0
    # every valid event has an assignment (root leaf before any model), every bad one a letter
    assert sorted(_assignment_ids(broker)) == sorted(set(_assignment_ids(broker)))
    assert len(_assignment_ids(broker)) == valid
    assert len(broker.records(DLQ)) == 3000 - valid
    assert broker.committed["streammom"] == broker.end_offsets(IN)  # committed after flush
    learner = _learner(settings, broker)
    assert learner.run() == 0
    assert learner.counters["processed"] == valid
    reference = MemoryBroker()
    _fill(reference, 3000)
    assert named_root_sums(learner.engine) == _one_process_sums(tmp_path, reference)
    # the learner published under the bare model name, epoch 1, and checkpointed its state
    models = [r for r in broker.records(MODELS) if r.key == b"streammom"]
    assert models and dict(models[-1].headers)["model_epoch"] == b"1"
    assert any(r.key.startswith(b"streammom/manifest/") for r in broker.records(STATE))


def test_frames_produced_twice_are_learned_once(tmp_path: Path) -> None:
    """An ingest worker dies after producing frames but before committing: its successor
    produces those frames again; the learner's watermarks learn each event once."""
    broker = MemoryBroker()
    valid = _fill(broker, 2000)
    settings = _settings(tmp_path)
    crashed = _ingest(settings, broker)
    crashed.restore()
    for _ in range(5):  # 5 batches of 250 produced and flushed; a commit at 700 records only
        crashed.process_batch(crashed.source.poll(250, 0.0))
    committed = sum(broker.committed["streammom"].values())
    assert 0 < committed < 5 * 250
    assert _ingest(settings, broker).run() == 0
    learner = _learner(settings, broker)
    assert learner.run() == 0
    assert learner.counters["processed"] == valid
    skipped = learner.metrics.frame_events_skipped._value.get()
    assert skipped > 0
    reference = MemoryBroker()
    _fill(reference, 2000)
    assert named_root_sums(learner.engine) == _one_process_sums(tmp_path, reference)


def test_a_rebalance_that_keeps_a_partition_leaves_no_hole_in_its_frames(
        tmp_path: Path) -> None:
    """Records polled and held back (a partial block) are dropped when their partitions are
    revoked; kafka-python 3 keeps the fetch position of a partition assigned back to the same
    consumer, past those records. The ingest worker seeks back to the first of them, so its
    frames still tile the log and the learner learns every event (no gap, nothing skipped).
    Without the seek, the frame after the rebalance started past the dropped records."""
    broker = MemoryBroker()
    valid = _fill(broker, 2000)
    settings = _settings(tmp_path)
    ingest = _ingest(settings, broker)
    ingest.restore()
    ingest.process_batch(ingest.source.poll(250, 0.0))  # one block framed and flushed
    held = ingest.source.poll(37, 0.0)  # the next records, a partial block: held back
    assert held and ingest.blocks.take_ready(held, ingest.source.lag) == []
    ingest.source.rebalance()
    assert ingest.blocks.pending == []
    assert ingest.run() == 0
    frames = [decode_frame(r.value) for r in broker.records(FRAMES)]
    for part in range(4):
        spans = [(f.start, f.end) for f in frames if f.partition == part]
        assert spans[0][0] == 0
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)), spans  # no hole
        assert spans[-1][1] == broker.end_offsets(IN)[(IN, part)]
    learner = _learner(settings, broker)
    assert learner.run() == 0
    assert learner.counters["processed"] == valid
    assert learner.metrics.frame_gaps._value.get() == 0


def test_a_rebalance_before_the_first_batch_rereads_the_held_records(tmp_path: Path) -> None:
    """The one-process worker seeks a partition it gets back to its state's offset; a partition
    with no offset yet (nothing learned from it) goes back to the first record it dropped."""
    broker = MemoryBroker()
    valid = _fill(broker, 1200)
    worker = memory_worker(_settings(tmp_path), broker)
    worker.restore()
    held = worker.source.poll(37, 0.0)
    assert held and worker.blocks.take_ready(held, worker.source.lag) == []
    worker.source.rebalance()
    assert worker.run() == 0
    assert worker.counters["processed"] == valid
    assert sum(worker.counters["rejected"].values()) == 1200 - valid


def test_standby_takes_over_from_the_state_topic(tmp_path: Path) -> None:
    """The active learner dies without a final checkpoint; the next one restores the last
    checkpoint from the state topic, replays the frames since and ends with exact sums; its
    epoch and versions are above everything published before."""
    broker = MemoryBroker()
    valid = _fill(broker, 3000)
    settings = _settings(tmp_path)
    # small ingest batches: ~60 frames, several polls of 16 (partial blocks held back)
    assert _ingest(small_settings(tmp_path, "ingest", worker={"batch_max_records": 50}),
                   broker).run() == 0
    first = _learner(settings, broker)
    first.restore()
    for _ in range(30):  # a frame a batch: about half of the frames
        first.process_batch(first.source.poll(1, 0.0))
    assert first.active and first.store.seq >= 1  # checkpointed at least once, then "killed"
    learned_by_first = first.counters["processed"]
    # the group's position may be past the checkpoint: the frames the new learner reads before
    # its take-over seeks back must not be learned (their watermarks would skip the ones before)
    checkpointed = first.last_checkpoint_offsets[(FRAMES, 0)]
    assert checkpointed + 3 < broker.end_offsets(FRAMES)[(FRAMES, 0)]
    broker.committed.setdefault("g.learner", {})[(FRAMES, 0)] = checkpointed + 3
    second = _learner(settings, broker)
    assert second.run() == 0
    assert second.store.epoch == 2 and second.counters["processed"] == valid
    assert second.metrics.frame_gaps._value.get() == 0
    assert learned_by_first < valid
    reference = MemoryBroker()
    _fill(reference, 3000)
    assert named_root_sums(second.engine) == _one_process_sums(tmp_path, reference)
    versions = [(int(dict(r.headers)["model_epoch"]), int(dict(r.headers)["model_version"]))
                for r in broker.records(MODELS) if r.key == b"streammom"]
    assert [v for _, v in versions] == sorted(v for _, v in versions)
    assert len({v for _, v in versions}) == len(versions)
    assert {e for e, _ in versions} == {1, 2}


def test_ingest_follows_the_newest_epoch_only(tmp_path: Path) -> None:
    broker = MemoryBroker()
    _fill(broker, 1500)
    settings = _settings(tmp_path)
    assert _ingest(settings, broker).run() == 0
    assert _learner(settings, broker).run() == 0
    good = [r for r in broker.records(MODELS) if r.key == b"streammom"][-1]
    headers = dict(good.headers)
    follower = ModelFollower(MemoryReader(broker, MODELS), "streammom")
    follower.catch_up()
    assert follower.current == (int(headers["model_epoch"]), int(headers["model_version"]))
    # a zombie of epoch 0 publishes a "newer" version: ignored
    stale = [(k, v if k != "model_epoch" else b"0") for k, v in good.headers]
    stale = [(k, v if k != "model_version" else b"999") for k, v in stale]
    broker.append(MODELS, good.value, key=b"streammom", headers=stale)
    assert follower.update() is False
    assert follower.current[0] == int(headers["model_epoch"])
    # a corrupt archive of a newer epoch is skipped; the model in use stays
    broker.append(MODELS, b"garbage", key=b"streammom",
                  headers=[("model_epoch", b"99"), ("model_version", b"1")])
    assert follower.update() is False and follower.rejected == 1


def test_frames_larger_than_a_message_are_cut_and_still_tile_the_log(tmp_path: Path) -> None:
    broker = MemoryBroker()
    valid = _fill(broker, 1200)
    settings = small_settings(tmp_path, model={"vocabulary_capacity": 4096},
                              kafka={"max_request_size": 8192})  # 4 KiB a message
    assert _ingest(settings, broker).run() == 0
    frames = broker.records(FRAMES)
    assert max(len(r.value) for r in frames) <= 8192 - 4096
    by_partition: dict[int, list] = {}
    for r in frames:
        f = decode_frame(r.value)
        by_partition.setdefault(f.partition, []).append(f)
    for partition, parts in by_partition.items():  # contiguous ranges, whole log covered
        assert parts[0].start == 0
        assert all(a.end == b.start for a, b in itertools.pairwise(parts))
        assert parts[-1].end == broker.end_offsets(IN)[(IN, partition)]
    assert len(frames) > 4 * 1200 // 250  # cut: more than one frame per partition and batch
    learner = _learner(settings, broker)
    assert learner.run() == 0
    assert learner.counters["processed"] == valid
    assert learner.metrics.frame_gaps._value.get() == 0


def test_a_model_naming_no_feature_routes_to_the_root(tmp_path: Path) -> None:
    """A model published before the learner learned an event names no feature: ingest
    follows it (its version stamps the assignments) and routes to the root leaf."""
    broker = MemoryBroker()
    settings = _settings(tmp_path)
    # the first frame holds no valid event (its one record was dead-lettered)
    broker.append(FRAMES, encode_frame(IN, 0, 0, 1, [], [], []))
    assert _learner(settings, broker).run() == 0
    [published] = [r for r in broker.records(MODELS) if r.key == b"streammom"]
    follower = ModelFollower(MemoryReader(broker, MODELS), "streammom")
    assert follower.update() is True and follower.rejected == 0
    assert follower.vocabulary is None
    routing = follower.assign([["I10"], [], ["E11", "J45"]], binary=True)
    assert routing.leaf_ids.tolist() == [0, 0, 0]
    assert routing.model_version == int(dict(published.headers)["model_version"])


def test_a_frames_topic_of_several_partitions_stops_the_learner(tmp_path: Path) -> None:
    """Its single partition is the election: with two, two learners would both write."""
    broker = MemoryBroker()
    broker.create_topic(FRAMES, 2)
    learner = _learner(_settings(tmp_path), broker)
    with pytest.raises(SystemExit) as exit_info:
        learner.run()
    assert exit_info.value.code == 2
    assert not learner.active and broker.records(MODELS) == []
