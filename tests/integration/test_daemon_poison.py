"""One message must never stop the worker, on the real broker (issue #12, items 1 and 5): a
``ts`` that overflows ``float()`` and a 5 MB message (larger than the producer may send) are
both dead-lettered — the big one as a truncated copy with its size and hash — and every valid
event around them is processed by the same, never restarted, daemon."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import Daemon, TopicReader, make_topics, new_prefix, produce, wait_until

from service.commands.produce import sample_messages

BIG = 5 * 1024 * 1024


def _produce_big(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                             max_request_size=2 * BIG, max_block_ms=60_000)
    try:
        producer.send(topic, key=key, value=value).get(timeout=60)
    finally:
        producer.close(timeout=10)


def _run_until(bootstrap: str, topics: dict[str, str], tmp_path: Path, group: str, *,
               processed: int, letters: int,
               probe: Callable[[Daemon], Any] = lambda d: None) -> tuple[Daemon, list[Any], Any]:
    """One daemon over the pre-filled input until ``processed`` events are done and
    ``letters`` dead letters are read; ``probe`` runs on the live daemon before the stop.
    Asserts the one process exits 0 without a restart."""
    daemon = Daemon(bootstrap, topics, tmp_path, group=group).start()
    dlq = TopicReader(bootstrap, topics["dead_letters"])
    try:
        wait_until(lambda: daemon.processed_while_running() >= processed, 120,
                   message=f"{processed} events processed")
        read = dlq.read_until(letters, 60)
        daemon.alive()
        seen = probe(daemon)
    finally:
        code = daemon.stop()
        dlq.close()
    assert code == 0, daemon.log_tail()
    assert daemon.starts == 1
    return daemon, read, seen


@pytest.mark.kafka
def test_poison_and_oversized_messages_are_dead_lettered(
    kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    prefix = new_prefix("poison")
    big_topic = {"max.message.bytes": str(2 * BIG)}
    topics = {
        "input": kafka_topic_factory(1, prefix=f"{prefix}.events", config=big_topic),
        "assignments": kafka_topic_factory(1, prefix=f"{prefix}.assignments"),
        "models": kafka_topic_factory(1, prefix=f"{prefix}.models",
                                      config={"cleanup.policy": "compact"}),
        "dead_letters": kafka_topic_factory(1, prefix=f"{prefix}.dlq"),
    }
    before = list(sample_messages(600, seed=61))
    after = list(sample_messages(600, seed=62))
    poison = (b'{"type": "encounter", "id": "x", "entity_id": "p", "codes": ["A00"], "ts": '
              + b"1" * 400 + b"}")
    big = b'{"type": "encounter", "pad": "' + b"y" * BIG + b'"}'
    produce(kafka_bootstrap, topics["input"], before)
    produce(kafka_bootstrap, topics["input"], [(b"poison", poison)])
    _produce_big(kafka_bootstrap, topics["input"], b"big", big)
    produce(kafka_bootstrap, topics["input"], after)

    daemon, letters, _ = _run_until(kafka_bootstrap, topics, tmp_path, f"{prefix}-g",
                                    processed=1200, letters=2)
    by_key = {r.key: r for r in letters}
    assert set(by_key) == {b"poison", b"big"}, [r.key for r in letters]

    first = dict(by_key[b"poison"].headers)
    assert first["dlq.reason"] == b"schema" and b"outside the accepted window" in first["dlq.error"]
    assert by_key[b"poison"].value == poison

    copy = by_key[b"big"]
    headers = dict(copy.headers)
    assert headers["dlq.reason"] == b"oversized"
    assert headers["dlq.truncated"] == b"true"
    assert headers["dlq.original.bytes"] == str(len(big)).encode()
    assert headers["dlq.original.sha256"] == hashlib.sha256(big).hexdigest().encode()
    assert 0 < len(copy.value) < 1_048_576 and big.startswith(copy.value)

    log = daemon.log_path.read_text()
    exits = [json.loads(line) for line in log.splitlines()
             if line.startswith("{") and '"msg":"exit"' in line]
    assert len(exits) == 1 and exits[0]["processed"] == 1200  # one process did it all


class _NotUtf8Key(str):
    """A header key that encodes to bytes which are not UTF-8 (any client may write them:
    the protocol stores raw bytes; kafka-python cannot read them back)."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"\xff\xfe-key"


@pytest.mark.kafka
def test_a_record_the_client_cannot_read_is_dead_lettered_not_retried_forever(
    kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    """kafka-python raises CorruptRecordError for a record with a non-UTF-8 header key and
    stays on it; the old worker took that for an outage and retried forever (partition
    blocked). Now the record is dead-lettered as ``unreadable`` and everything after it is
    processed."""
    from kafka import KafkaProducer

    prefix = new_prefix("unreadable")
    topics = make_topics(kafka_topic_factory, prefix)
    before = list(sample_messages(300, seed=63))
    after = list(sample_messages(300, seed=64))
    produce(kafka_bootstrap, topics["input"], before)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    try:
        producer.send(topics["input"], key=b"bad-header", value=after[0][1],
                      headers=[(_NotUtf8Key("x"), b"v")]).get(timeout=60)
    finally:
        producer.close(timeout=10)
    produce(kafka_bootstrap, topics["input"], after)

    _, letters, unreadable = _run_until(
        kafka_bootstrap, topics, tmp_path, f"{prefix}-g", processed=600, letters=1,
        probe=lambda d: d.metric("streammom_events_rejected_total", {"reason": "unreadable"}))
    assert len(letters) == 1
    headers = dict(letters[0].headers)
    assert headers["dlq.reason"] == b"unreadable"
    assert headers["dlq.source.offset"] == b"300"
    assert b"CorruptRecordError" in headers["dlq.error"]
    assert unreadable == 1.0
