"""Where the daemon's state comes from, on the real broker (issue #12, items 3, 6 and 9):

* an input topic deleted and recreated while the daemon is down is learned once, and the
  stored offsets follow the new log (no re-count on every restart), whether the new log is
  shorter than the stored offset (an offset reset) or longer (a new topic id);
* a state directory lost while the group kept its committed offsets is rebuilt from the
  earliest retained offsets (the default policy), with an error-level log line;
* two workers of one group publish their models under their own keys, and within a key the
  ``(model_epoch, model_version)`` headers never go back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import (
    Daemon,
    TopicReader,
    make_topics,
    new_prefix,
    produce,
    wait_until,
)

from service.checkpoint import CheckpointStore
from service.commands.produce import sample_messages
from service.devbroker.testing import create_topic


def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete ``topic``, wait until the broker has forgotten it, create it again."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tests-recreate")
    try:
        admin.delete_topics([topic], timeout_ms=30_000)
        wait_until(lambda: topic not in admin.list_topics(), 60, message=f"{topic} deleted")
        # the deletion is asynchronous on the broker: retry the creation until it is accepted
        def created() -> bool:
            try:
                create_topic(admin, topic, partitions)
            except Exception:
                return False
            return True

        wait_until(created, 60, interval=0.5, message=f"{topic} recreated")
    finally:
        admin.close()


def _run_until(daemon: Daemon, processed: int, timeout: float = 120) -> None:
    """Start ``daemon``, wait until it processed ``processed`` events in total (the counter
    continues from the checkpoint), and has nothing left to read; then stop it cleanly."""
    daemon.start()
    try:
        wait_until(lambda: daemon.processed_while_running() >= processed, timeout,
                   message=f"processed >= {processed}")
        wait_until(lambda: daemon.get("/readyz")[0] == 200
                   and daemon.metric("streammom_consumer_lag_records") == 0, timeout,
                   message="caught up")
    finally:
        code = daemon.stop()
    assert code == 0, daemon.log_tail()


def _daemon_over(
    bootstrap: str, topic_factory: Any, tmp_path: Path, name: str, *, partitions: int,
    events: int, seed: int,
) -> tuple[dict[str, str], Daemon]:
    """New topics with ``events`` sample events on the input, and a daemon (static member)
    that has learned them all and stopped cleanly."""
    prefix = new_prefix(name)
    topics = make_topics(topic_factory, prefix, partitions=partitions)
    produce(bootstrap, topics["input"], sample_messages(events, seed=seed))
    daemon = Daemon(bootstrap, topics, tmp_path / "d", group=f"{prefix}-g",
                    extra_env={"STREAMMOM_KAFKA__GROUP_INSTANCE_ID": f"{prefix}-0"})
    _run_until(daemon, events)
    return topics, daemon


@pytest.mark.kafka
def test_recreated_input_topic_is_counted_once(
    kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    topics, daemon = _daemon_over(kafka_bootstrap, kafka_topic_factory, tmp_path, "recreate",
                                  partitions=1, events=3000, seed=31)

    _recreate(kafka_bootstrap, topics["input"], 1)
    produce(kafka_bootstrap, topics["input"], sample_messages(1000, seed=32))
    _run_until(daemon, 4000)
    assert "input topic recreated" in daemon.log_path.read_text()
    ckpt = CheckpointStore(daemon.state).load()
    assert ckpt is not None
    assert ckpt.offsets == {(topics["input"], 0): 1000}  # what was actually consumed
    seen = ckpt.engine().n_events_seen_
    assert seen == 4000

    # restarts over the new log count nothing twice
    for _ in range(2):
        _run_until(daemon, 4000)
        again = CheckpointStore(daemon.state).load()
        assert again is not None and again.counters["processed"] == 4000
        assert again.engine().n_events_seen_ == seen

    # recreated with MORE records than the stored offset: no offset reset could reveal it,
    # the topic's id (KIP-516) does — all 2,500 new events are learned, none skipped
    _recreate(kafka_bootstrap, topics["input"], 1)
    produce(kafka_bootstrap, topics["input"], sample_messages(2500, seed=33))
    _run_until(daemon, 6500)
    assert daemon.log_path.read_text().count("input topic recreated") == 2
    last = CheckpointStore(daemon.state).load()
    assert last is not None and last.offsets == {(topics["input"], 0): 2500}
    assert last.engine().n_events_seen_ == 6500


@pytest.mark.kafka
def test_lost_state_is_rebuilt_not_silently_restarted(
    kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    topics, daemon = _daemon_over(kafka_bootstrap, kafka_topic_factory, tmp_path, "lost",
                                  partitions=2, events=3000, seed=41)
    shutil.rmtree(daemon.state)
    daemon.state.mkdir()
    produce(kafka_bootstrap, topics["input"], sample_messages(500, seed=42))
    _run_until(daemon, 3500)
    ckpt = CheckpointStore(daemon.state).load()
    assert ckpt is not None and ckpt.counters["processed"] == 3500
    assert ckpt.engine().n_events_seen_ == 3500
    lines = [json.loads(line) for line in daemon.log_path.read_text().splitlines()
             if line.startswith("{")]
    lost = [r for r in lines if str(r.get("msg")).startswith("state lost")]
    assert lost and lost[0]["level"] == "error", lost


@pytest.mark.kafka
def test_two_workers_never_publish_a_version_going_back(
    kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path
) -> None:
    prefix = new_prefix("twomodels")
    topics = make_topics(kafka_topic_factory, prefix, partitions=2)
    daemons = [Daemon(kafka_bootstrap, topics, tmp_path / name, group=f"{prefix}-g")
               for name in ("a", "b")]
    reader = TopicReader(kafka_bootstrap, topics["models"])
    try:
        for d in daemons:
            d.start()
        # both members hold a partition before any input exists, so each learns ~7,000
        # events (enough to refit) whatever the order in which they joined
        wait_until(lambda: all(d.alive() is None and d.get("/readyz")[0] == 200
                               for d in daemons), 120, message="both workers assigned")
        produce(kafka_bootstrap, topics["input"], sample_messages(14_000, seed=51))
        wait_until(lambda: all(d.alive() is None for d in daemons)
                   and sum(d.processed() for d in daemons) >= 14_000, 180,
                   message="both workers processed the input")

        def trained_keys() -> set[bytes]:
            return {r.key for r in reader.read()
                    if int(dict(r.headers)["model_version"]) >= 1}

        wait_until(lambda: len(trained_keys()) == 2, 120, message="a trained model per worker")
    finally:
        codes = [d.stop() for d in daemons]
        reader.read()
        reader.close()
    assert codes == [0, 0], [d.log_tail() for d in daemons]
    by_key: dict[bytes, list[tuple[int, int]]] = {}
    for rec in reader.records:
        headers = dict(rec.headers)
        by_key.setdefault(rec.key, []).append(
            (int(headers["model_epoch"]), int(headers["model_version"])))
    assert len(by_key) == 2 and all(k.startswith(b"streammom/") for k in by_key)
    ids = {dict(r.headers)["worker_id"].decode() for r in reader.records}
    assert {f"streammom/{i}".encode() for i in ids} == set(by_key)
    for key, order in by_key.items():
        assert order == sorted(order), (key, order)
