"""Scale-out on the real broker (issue #16): 4 input partitions, 3 ingest workers and 2
learners as ``streammom run --role …`` processes; SIGKILL one ingest worker and the active
learner mid-stream.

Checks: the final learner state's sums equal a one-process run's over the same events
(exact: 0/1 rows, no forgetting, so every sum is an integer), every valid event has an
assignment, every malformed one a dead letter, and the models topic's versions never go back.
"""

from __future__ import annotations

import json
import os
import subprocess
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
    streammom_exe,
    wait_until,
)

from service.checkpoint import CheckpointStore
from service.commands.produce import sample_messages
from service.config import KafkaSettings
from service.kafka_reader import KafkaTopicReader
from service.kafka_sink import KafkaSink
from service.state_topic import TopicCheckpointStore
from streammom.engine_merge import named_root_sums

N = 24_000
MALFORMED_EVERY = 400
# exact sums need every token in the vocabulary whatever the order events arrive in
ENV = {"STREAMMOM_MODEL__VOCABULARY_CAPACITY": "4096",
       "STREAMMOM_WORKER__BATCH_MAX_RECORDS": "500"}


def _one_process_sums(values: list[bytes], tmp_path: Path, env: dict[str, str]) -> Any:
    """``streammom run`` in embedded mode over the same events (role all, one process)."""
    events = tmp_path / "ref-events.jsonl"
    events.write_bytes(b"\n".join(values) + b"\n")
    state = tmp_path / "ref-state"
    ref_env = {k: v for k, v in env.items()
               if not k.startswith(("STREAMMOM_KAFKA__", "STREAMMOM_WORKER__ROLE"))}
    ref_env["STREAMMOM_CHECKPOINT__DIR"] = str(state)
    subprocess.run([streammom_exe(), "run", "--input", str(events), "--output", os.devnull],
                   env=ref_env, check=True, timeout=300, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    ckpt = CheckpointStore(state).load()
    assert ckpt is not None
    return named_root_sums(ckpt.engine())


def _learner_state(bootstrap: str, topic: str) -> Any:
    cfg = KafkaSettings(bootstrap_servers=bootstrap)
    sink = KafkaSink(cfg)
    try:
        store = TopicCheckpointStore(sink, lambda: KafkaTopicReader(cfg, topic), topic,
                                     name="streammom", chunk_bytes=1 << 20)
        ckpt = store.load()
    finally:
        sink.close()
    assert ckpt is not None
    return ckpt


def _active(learners: list[Daemon]) -> list[Daemon]:
    return [d for d in learners if d.proc is not None and d.proc.poll() is None
            and d.metric("streammom_learner_active") == 1]


@pytest.mark.kafka
def test_ingest_and_learners_survive_sigkill(kafka_bootstrap: str, kafka_topic_factory: Any,
                                             tmp_path: Path) -> None:
    prefix = new_prefix("scale")
    topics = make_topics(kafka_topic_factory, prefix, partitions=4)
    frames = kafka_topic_factory(1, prefix=f"{prefix}.frames")
    state = kafka_topic_factory(1, prefix=f"{prefix}.state",
                                config={"cleanup.policy": "compact"})
    messages = list(sample_messages(N, seed=16, malformed_every=MALFORMED_EVERY))
    valid_ids = {json.loads(v)["id"] for k, v in messages if k is not None}
    assert len(valid_ids) == N
    group = f"{prefix}-g"

    def daemon(role: str, i: int) -> Daemon:
        return Daemon(kafka_bootstrap, topics, tmp_path / f"{role}{i}", group=group,
                      extra_env={**ENV, "STREAMMOM_WORKER__ROLE": role,
                                 "STREAMMOM_TOPICS__FRAMES": frames,
                                 "STREAMMOM_TOPICS__LEARNER_STATE": state})

    learners = [daemon("learner", i).start() for i in range(2)]
    ingest = [daemon("ingest", i).start() for i in range(3)]
    everyone = learners + ingest
    def state_events(d: Daemon) -> float:
        return d.metric("streammom_state_events") or 0.0

    try:
        wait_until(lambda: len(_active(learners)) == 1, 90, message="an active learner")
        half = len(messages) // 2
        produce(kafka_bootstrap, topics["input"], messages[:half])
        # mid-stream: the active learner has learned and checkpointed part of the first half
        wait_until(lambda: any(state_events(d) >= N // 6 and (d.metric(
            "streammom_last_checkpoint_timestamp_seconds") or 0) > 0 for d in _active(learners)),
                   120, message="the active learner learned and checkpointed")
        (active,) = _active(learners)
        ingest[0].kill()
        active.kill()
        produce(kafka_bootstrap, topics["input"], messages[half:])
        (standby,) = [d for d in learners if d is not active]
        wait_until(lambda: standby.alive() is None and state_events(standby) >= N, 180,
                   message=f"the standby took over and holds {N} events")
        assert state_events(standby) == N  # each event once: restored + learned since
        assert standby.metric("streammom_frame_gaps_total") == 0  # no frame learned out of turn
    finally:
        codes = {d.log_path.parent.name: d.stop() for d in everyone
                 if d.proc is not None and d.proc.poll() is None}
    assert set(codes.values()) == {0}, [d.log_tail() for d in everyone]

    ckpt = _learner_state(kafka_bootstrap, state)
    assert ckpt.counters["processed"] == N
    assert named_root_sums(ckpt.engine()) == _one_process_sums(
        [v for _, v in messages], tmp_path, standby.env)

    reader = TopicReader(kafka_bootstrap, topics["assignments"])
    try:  # every valid event assigned (replays after the kill repeat some: at least once)
        wait_until(lambda: set(assignment_ids(reader.read())) >= valid_ids, 60,
                   message="every event id assigned")
    finally:
        reader.close()
    letters = TopicReader(kafka_bootstrap, topics["dead_letters"])
    try:
        wait_until(lambda: len(letters.read()) >= len(messages) - N, 60,
                   message="every malformed message dead-lettered")
    finally:
        letters.close()

    models = TopicReader(kafka_bootstrap, topics["models"])
    try:
        records = [r for r in models.read(2000) if r.key == b"streammom"]
    finally:
        models.close()
    stamps = [(int(dict(r.headers)["model_epoch"]), int(dict(r.headers)["model_version"]))
              for r in records]
    assert len(stamps) >= 2 and len({e for e, _ in stamps}) >= 2  # both generations published
    assert stamps == sorted(stamps)
    assert [v for _, v in stamps] == sorted(v for _, v in stamps)
