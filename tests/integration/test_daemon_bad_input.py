"""Malformed events of every kind interleaved with valid ones: all dead-lettered, nothing
else lost, the daemon never exits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import (
    Daemon,
    TopicReader,
    assignment_ids,
    make_topics,
    new_prefix,
    produce,
    wait_until,
)

from service.commands.produce import sample_messages
from service.events import REJECT_REASONS
from service.synthetic import malformed_samples

VALID = 3000
EVERY = 50


@pytest.mark.kafka
def test_bad_input(kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path) -> None:
    prefix = new_prefix("bad")
    topics = make_topics(kafka_topic_factory, prefix)
    messages = list(sample_messages(VALID, seed=5, malformed_every=EVERY))
    bad_values = {raw: reason for reason, raw in malformed_samples()}
    valid_ids = [json.loads(v)["id"] for _, v in messages if v not in bad_values]
    bad = [v for _, v in messages if v in bad_values]
    assert len(valid_ids) == VALID and len(bad) == VALID // EVERY
    produce(kafka_bootstrap, topics["input"], messages)
    daemon = Daemon(kafka_bootstrap, topics, tmp_path, group=f"{prefix}-g").start()
    dlq = TopicReader(kafka_bootstrap, topics["dead_letters"])
    out = TopicReader(kafka_bootstrap, topics["assignments"])
    try:
        dead = dlq.read_until(len(bad), 120)
        assigned = out.read_until(VALID, 120)
        daemon.alive()
        assert sorted(assignment_ids(assigned)) == sorted(valid_ids)
        reasons = []
        for rec in dead:
            h = dict(rec.headers)
            reason = h["dlq.reason"].decode()
            assert bad_values[rec.value] == reason  # original bytes + the right reason
            assert h["dlq.source.topic"].decode() == topics["input"]
            assert int(h["dlq.source.offset"]) >= 0 and h["dlq.error"]
            reasons.append(reason)
        assert set(reasons) == set(REJECT_REASONS)
        wait_until(
            lambda: daemon.metric("streammom_events_rejected_total") == len(bad),
            30,
            message="rejected metric",
        )
        for reason in REJECT_REASONS:
            assert daemon.metric("streammom_events_rejected_total", {"reason": reason}) == (
                reasons.count(reason)
            )
        assert daemon.processed() == VALID
    finally:
        dlq.close()
        out.close()
        code = daemon.stop()
    assert code == 0, daemon.log_tail()
