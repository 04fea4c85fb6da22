"""End to end against the real broker: 20,000 events in → 20,000 assignments out."""

from __future__ import annotations

from collections import Counter
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
from streammom.model import HierarchyModel

N = 20_000


@pytest.mark.kafka
def test_end_to_end(kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path) -> None:
    prefix = new_prefix("e2e")
    topics = make_topics(kafka_topic_factory, prefix, partitions=3)
    messages = list(sample_messages(N, seed=11))
    ids = [m[1] for m in messages]
    produce(kafka_bootstrap, topics["input"], messages)
    daemon = Daemon(kafka_bootstrap, topics, tmp_path, group=f"{prefix}-g").start()
    reader = TopicReader(kafka_bootstrap, topics["assignments"])
    try:
        wait_until(lambda: daemon.get("/healthz")[0] == 200, 60, message="/healthz")
        records = reader.read_until(N, 180)
        daemon.alive()
        got = Counter(assignment_ids(records))
        assert len(got) == N and set(got.values()) == {1}, "each event exactly once"
        assert len(ids) == N
        # /metrics agree
        wait_until(lambda: daemon.processed() == N, 30, message="processed == N")
        assert (daemon.metric("streammom_events_rejected_total") or 0) == 0
        assert daemon.metric("streammom_assignments_published_total") == N
        assert daemon.get("/readyz")[0] == 200
        # the compacted models topic holds a deserialisable model
        models = TopicReader(kafka_bootstrap, topics["models"])
        recs = models.read_until(1, 60)
        models.close()
        model = HierarchyModel.from_bytes(recs[-1].value)
        assert recs[-1].key == b"streammom/" + dict(recs[-1].headers)["worker_id"]
        assert model.n_leaves >= 1
        assert dict(recs[-1].headers)["model_version"] == str(model.version).encode()
    finally:
        reader.close()
        code = daemon.stop()
        print(daemon.log_tail())
    assert code == 0, daemon.log_tail()
