"""SIGKILL the daemon at 3 seeded points of a 50,000-event run: the final checkpointed state
equals an uninterrupted run's, and every event is assigned.

One input partition, so the event order is total: with several partitions the interleaving of
partitions inside batches differs between runs, and the states would then agree only as far as
the engine is order-independent between refits (a multiset property).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
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

N = 50_000


def _reference_engine(values: list[bytes], tmp_path: Path, env: dict[str, str]) -> Any:
    """The same events through the same worker code, uninterrupted: ``streammom run`` in
    embedded mode over a JSONL file, with the daemon's environment (same engine settings, same
    BLAS threading), in a subprocess."""
    events = tmp_path / "ref-events.jsonl"
    events.write_bytes(b"\n".join(values) + b"\n")
    state = tmp_path / "ref-state"
    ref_env = {k: v for k, v in env.items() if not k.startswith("STREAMMOM_KAFKA__")}
    ref_env["STREAMMOM_CHECKPOINT__DIR"] = str(state)
    subprocess.run([streammom_exe(), "run", "--input", str(events), "--output", os.devnull],
                   env=ref_env, check=True, timeout=300, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    ckpt = CheckpointStore(state).load()
    assert ckpt is not None and next(iter(ckpt.offsets.values())) == len(values)
    return ckpt.engine()


def _assert_same_state(a: Any, b: Any) -> None:
    _ma, arrays_a = a.to_archive()
    _mb, arrays_b = b.to_archive()
    assert sorted(arrays_a) == sorted(arrays_b)
    for name in arrays_a:
        x, y = np.asarray(arrays_a[name]), np.asarray(arrays_b[name])
        assert x.shape == y.shape, name
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-9, err_msg=name)
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)
    ta, tb = a.model_, b.model_
    assert sorted(ta.nodes) == sorted(tb.nodes)
    assert all(ta.nodes[i].children == tb.nodes[i].children for i in ta.nodes)
    assert a.n_events_seen_ == b.n_events_seen_ == N


@pytest.mark.kafka
def test_crash_recovery(kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path) -> None:
    prefix = new_prefix("crash")
    topics = make_topics(kafka_topic_factory, prefix, partitions=1)
    messages = list(sample_messages(N, seed=21))
    produce(kafka_bootstrap, topics["input"], messages)
    # static membership: a restarted instance takes over at once (no session-timeout wait)
    daemon = Daemon(
        kafka_bootstrap,
        topics,
        tmp_path / "d",
        group=f"{prefix}-g",
        extra_env={"STREAMMOM_KAFKA__GROUP_INSTANCE_ID": f"{prefix}-0"},
    )
    rng = np.random.default_rng(2026)
    kill_points = sorted(int(x) for x in rng.integers(3_000, N - 5_000, size=3))
    daemon.start()
    try:
        for point in kill_points:
            wait_until(
                lambda p=point: daemon.processed_while_running() >= p,
                120,
                interval=0.05,
                message=f"processed >= {point}",
            )
            daemon.kill()
            daemon.start()
        wait_until(
            lambda: daemon.processed_while_running() >= N,
            180,
            message=f"processed == {N}",
        )
        assert daemon.processed() == N  # exactly-once counts restored from checkpoints
    finally:
        code = daemon.stop()
    assert code == 0, daemon.log_tail()
    ckpt = CheckpointStore(daemon.state).load()
    assert ckpt is not None and ckpt.offsets == {(topics["input"], 0): N}
    _assert_same_state(
        ckpt.engine(), _reference_engine([v for _, v in messages], tmp_path, daemon.env)
    )
    ids = {json.loads(v)["id"] for _, v in messages}
    reader = TopicReader(kafka_bootstrap, topics["assignments"])
    try:
        # nothing lost; replays after the kills repeat some outputs (at least once)
        wait_until(lambda: set(assignment_ids(reader.read())) >= ids, 120,
                   message="every event id assigned")
        assert set(assignment_ids(reader.records)) == ids
    finally:
        reader.close()
    assert daemon.starts == 4
