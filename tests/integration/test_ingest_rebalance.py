"""An ingest worker that keeps a partition through a rebalance, on the real broker.

kafka-python 3 keeps the fetch position of a partition that an eager rebalance revokes and
assigns back to the same consumer. The worker drops the records it had polled and held back
(a partial offset-aligned block) when the partition is revoked, so it must seek back to the
first of them: otherwise its next frame of that partition starts past them and the learner
never learns those events (the intermittent shortfall of the scale-out test).
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
from daemon_harness import produce, wait_until
from kafka import KafkaConsumer, TopicPartition

from service.commands.produce import sample_messages
from service.config import load_settings
from service.devbroker.testing import FAST_GROUP_CONSUMER, unique_name
from service.frames import decode_frame
from service.ingest import IngestWorker
from service.kafka_source import KafkaSource
from service.memory_transport import MemoryBroker, MemoryReader, MemorySink
from service.metrics import WorkerMetrics
from service.model_follower import ModelFollower

pytestmark = pytest.mark.kafka

N = 1200
DEADLINE_S = 60.0


class _GroupMember(threading.Thread):
    """A second consumer of the group, polling until stopped (it takes a partition)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                      max_poll_records=10, **FAST_GROUP_CONSUMER)
        self.stop = threading.Event()
        self.assigned: set[int] = set()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.consumer.poll(timeout_ms=200)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
        finally:
            self.consumer.close(autocommit=False)


def test_a_partition_kept_through_a_rebalance_is_framed_without_a_hole(
        kafka_bootstrap: str, kafka_topic_factory, tmp_path: Path) -> None:
    topic = kafka_topic_factory(partitions=2)
    produce(kafka_bootstrap, topic, list(sample_messages(N, seed=5)))
    group = unique_name("rebalance")
    settings = load_settings(overrides={
        "kafka": {"bootstrap_servers": kafka_bootstrap, "group_id": group,
                  "session_timeout_ms": 6000, "heartbeat_interval_ms": 500},
        "topics": {"input": topic},
        "worker": {"batch_max_records": 1000, "poll_timeout_s": 0.2},
        "http": {"enabled": False},
        "checkpoint": {"dir": str(tmp_path / "state")},
    })
    outputs = MemoryBroker()
    source = KafkaSource(settings.kafka, topic, max_poll_records=37)
    ingest = IngestWorker(settings, source, MemorySink(outputs),
                          models=ModelFollower(MemoryReader(outputs, settings.topics.models),
                                               settings.model.name),
                          metrics=WorkerMetrics(), exit_when_idle=True)
    ingest.restore()
    # poll both partitions' first records and hold them back, as the loop does with a partial
    # block of 1,000 (nothing is framed yet)
    deadline = time.monotonic() + DEADLINE_S
    while {r.partition for r in ingest.blocks.pending} != {0, 1}:
        assert time.monotonic() < deadline, "no records of both partitions"
        assert ingest.blocks.take_ready(source.poll(37, 0.5), source.lag) == []
    source.pause()  # keep taking part in the group without reading further
    member = _GroupMember(kafka_bootstrap, topic, group)
    member.start()
    try:
        def rebalanced() -> bool:
            assert source.poll(37, 0.2) == []
            return len(member.assigned) == 1 and len(source.assignment()) == 1
        wait_until(rebalanced, DEADLINE_S, message="the group split the partitions")
        ((_, kept),) = source.assignment()
        assert ingest.blocks.pending == []  # dropped at the revocation
        source.resume()
        assert ingest.run() == 0
    finally:
        member.stop.set()
        member.join(timeout=30)
    frames = [decode_frame(r.value) for r in outputs.records(settings.topics.frames)]
    spans = [(f.start, f.end) for f in frames if f.partition == kept]
    assert spans, "no frame of the kept partition"
    assert spans[0][0] == 0, f"the first frame of partition {kept} starts at {spans[0][0]}"
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)), spans  # no hole
    probe = KafkaConsumer(bootstrap_servers=kafka_bootstrap)
    try:
        end = probe.end_offsets([TopicPartition(topic, kept)])[TopicPartition(topic, kept)]
    finally:
        probe.close()
    assert spans[-1][1] == end
