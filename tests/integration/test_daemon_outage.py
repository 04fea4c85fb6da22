"""Broker outage: stop the broker for 20 s mid-run; the daemon recovers by itself, /readyz is
503 during the outage while /healthz stays 200, and nothing is lost."""

from __future__ import annotations

import json
import threading
import time
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

N = 20_000
OUTAGE_S = 20.0


@pytest.mark.kafka
def test_broker_outage(
    kafka_broker: Any, kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    prefix = new_prefix("outage")
    topics = make_topics(kafka_topic_factory, prefix)
    messages = list(sample_messages(N, seed=33))
    first, second = messages[: N // 2], messages[N // 2 :]
    produce(kafka_bootstrap, topics["input"], first)
    daemon = Daemon(
        kafka_bootstrap,
        topics,
        tmp_path,
        group=f"{prefix}-g",
        extra_env={"STREAMMOM_WORKER__HEARTBEAT_TIMEOUT_S": "15"},
    ).start()
    try:
        wait_until(
            lambda: daemon.get("/readyz")[0] == 200 and daemon.processed() > 2000,
            90,
            message="ready and processing",
        )
        kafka_broker.stop()
        t_stop = time.monotonic()
        saw_503 = False
        health: list[int] = []
        while time.monotonic() - t_stop < OUTAGE_S:  # the scenario: 20 s without a broker
            daemon.alive()
            health.append(daemon.get("/healthz")[0])
            saw_503 = saw_503 or daemon.get("/readyz")[0] == 503
            time.sleep(0.25)
        assert saw_503, "/readyz never reported the outage"
        assert set(health) == {200}, f"/healthz not always 200 during the outage: {set(health)}"
        kafka_broker.start()
        # the second half arrives after the broker is back
        thread = threading.Thread(target=produce, args=(kafka_bootstrap, topics["input"], second))
        thread.start()
        wait_until(lambda: daemon.get("/readyz")[0] == 200, 120, message="ready again")
        thread.join(120)
        wait_until(lambda: daemon.processed() >= N, 120, message=f"processed == {N}")
        assert daemon.processed() == N
        ids = {json.loads(v)["id"] for _, v in messages}
        reader = TopicReader(kafka_bootstrap, topics["assignments"])
        try:  # re-sent outputs may appear twice (at least once); none may be missing
            wait_until(lambda: set(assignment_ids(reader.read())) >= ids, 120,
                       message="every event id assigned")
            assert set(assignment_ids(reader.records)) == ids
        finally:
            reader.close()
        assert (daemon.metric("streammom_events_rejected_total") or 0) == 0
    finally:
        if not kafka_broker.is_running:
            kafka_broker.start()
        code = daemon.stop()
    assert code == 0, daemon.log_tail()
