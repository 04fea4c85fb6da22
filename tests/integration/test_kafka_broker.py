"""The real Apache Kafka test broker: consumer-group resume, restart with data, no orphan JVM."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from service.devbroker import KafkaBroker
from service.devbroker._proc import group_alive
from service.devbroker.testing import (
    FAST_GROUP_CONSUMER,
    create_topic,
    unique_name,
    wait_until,
)

pytestmark = pytest.mark.kafka

N_MESSAGES = 1000
DEADLINE_S = 60.0


def produce_json(bootstrap: str, topic: str, ids: Iterable[int]) -> None:
    """Produce ``{"id": i}`` JSON values keyed by ``i`` (bytes built here: no serializer
    lambdas, deprecated in kafka-python 3) and wait until every send is acknowledged."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futures = [
            producer.send(topic, key=str(i).encode(), value=json.dumps({"id": i}).encode())
            for i in ids
        ]
        producer.flush(timeout=DEADLINE_S)
        for fut in futures:
            fut.get(timeout=DEADLINE_S)
    finally:
        producer.close(timeout=10)


def group_consumer(bootstrap: str, topic: str, group: str) -> KafkaConsumer:
    """A manually committing group member with fast join/rebalance settings."""
    return KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        max_poll_records=50,
        **FAST_GROUP_CONSUMER,
    )


def consume_committing(
    consumer: KafkaConsumer,
    until: int,
    seen: list[int],
    first_offsets: dict[int, int] | None = None,
) -> None:
    """Poll, record ids, commit after every batch, until ``len(seen) >= until`` (deadline)."""
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < until:
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumed only {len(seen)} of {until} within {DEADLINE_S}s")
        batch = consumer.poll(timeout_ms=500)
        for tp, records in batch.items():
            if first_offsets is not None:
                first_offsets.setdefault(tp.partition, records[0].offset)
            seen.extend(json.loads(r.value)["id"] for r in records)
        if batch:
            consumer.commit()  # commits the positions after everything returned so far


def test_group_resumes_from_committed_offsets(kafka_bootstrap: str, kafka_topic_factory) -> None:
    topic = kafka_topic_factory(partitions=3)
    group = unique_name("group")
    produce_json(kafka_bootstrap, topic, range(N_MESSAGES))

    seen: list[int] = []
    first = group_consumer(kafka_bootstrap, topic, group)
    try:
        consume_committing(first, N_MESSAGES // 2, seen)
        partitions = [TopicPartition(topic, p) for p in range(3)]
        committed = {tp.partition: first.committed(tp) or 0 for tp in partitions}
    finally:
        first.close(autocommit=False)
    assert sum(committed.values()) == len(seen) >= N_MESSAGES // 2

    resumed_at: dict[int, int] = {}
    second = group_consumer(kafka_bootstrap, topic, group)
    try:
        consume_committing(second, N_MESSAGES, seen, resumed_at)
    finally:
        second.close(autocommit=False)

    assert len(seen) == N_MESSAGES, "duplicates or losses across the group handover"
    assert set(seen) == set(range(N_MESSAGES))
    # The new member started each partition exactly at the offset the old one committed.
    assert resumed_at, "the second consumer received nothing"
    assert resumed_at == {p: committed[p] for p in resumed_at}


def test_restart_preserves_topic_data(kafka_broker: KafkaBroker) -> None:
    # Not kafka_topic_factory: with an external session broker, kafka_broker is another one.
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        topic = create_topic(admin, unique_name("restart"), partitions=2)
    finally:
        admin.close()
    produce_json(kafka_broker.bootstrap, topic, range(100))
    bootstrap, old_pid = kafka_broker.bootstrap, kafka_broker.pid
    try:
        kafka_broker.stop()
        assert not kafka_broker.is_running
    finally:
        kafka_broker.start()
    assert kafka_broker.bootstrap == bootstrap
    assert kafka_broker.pid != old_pid

    produce_json(bootstrap, topic, range(100, 120))  # still writable after the restart
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        ids: list[int] = []

        def all_read() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                ids.extend(json.loads(r.value)["id"] for r in records)
            return len(ids) >= 120

        wait_until(all_read, timeout=DEADLINE_S, what="120 records after restart")
    finally:
        consumer.close()
    assert sorted(ids) == list(range(120))


def test_stop_leaves_no_process(kafka_broker_factory) -> None:
    broker = kafka_broker_factory()
    pid, workdir = broker.pid, broker.workdir
    assert pid is not None and group_alive(pid)
    broker.close()
    assert not broker.is_running
    assert not group_alive(pid), "JVM (or a process of its group) survived close()"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped too: not even a zombie is left
    assert not workdir.exists()


def test_a_paused_source_keeps_polling_and_loses_nothing(kafka_bootstrap: str,
                                                         kafka_topic_factory) -> None:
    """``KafkaSource.pause`` (the worker's backpressure): polls return nothing, also for
    records the client had already fetched; after ``resume`` every record arrives exactly
    once, in offset order per partition."""
    from service.config import KafkaSettings
    from service.kafka_source import KafkaSource

    topic = kafka_topic_factory(partitions=2)
    produce_json(kafka_bootstrap, topic, range(N_MESSAGES))
    cfg = KafkaSettings(bootstrap_servers=kafka_bootstrap, group_id=unique_name("group"),
                        session_timeout_ms=6000, heartbeat_interval_ms=500)
    source = KafkaSource(cfg, topic, max_poll_records=50)
    try:
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while not got:  # joined, assigned, first records fetched
            assert time.monotonic() < deadline, "no records before the deadline"
            got = source.poll(50, 0.5)
        assert len(source.assignment()) == 2
        source.pause()
        for _ in range(6):  # ~1.2 s of polls: the client's prefetched records are held back
            assert source.poll(50, 0.2) == []
        assert sum(source.lag().values()) > 0
        source.resume()
        while len(got) < N_MESSAGES:
            assert time.monotonic() < deadline, f"only {len(got)} records after resume"
            got += source.poll(50, 0.5)
    finally:
        source.close()
    assert sorted(json.loads(r.value)["id"] for r in got) == list(range(N_MESSAGES))
    for p in (0, 1):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets)))
