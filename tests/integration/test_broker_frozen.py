"""A frozen broker (SIGSTOP: it still accepts TCP connections but answers nothing) must show on
``/readyz`` within seconds while ``/healthz`` stays 200, and the daemon must recover by itself
once the broker answers again (SIGCONT).

Issue #12 item 4: before the fix ``/readyz`` stayed 200 for the whole 30 s freeze, because the
client's coordinator connection still counted as "connected".
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import Daemon, make_topics, new_prefix, produce, wait_until

from service.commands.produce import sample_messages
from service.devbroker.testing import create_topic, unique_name

N_BEFORE = 3_000
N_AFTER = 2_000
DETECT_S = 15.0  # the probe's bound is PROBE_TIMEOUT_MS; the old code answered 200 for 30 s+
FREEZE_S = 15.0  # how long the broker stays frozen after the daemon reported it
PROBE_TIMEOUT_MS = 4000


@contextlib.contextmanager
def _admin(bootstrap: str) -> Iterator[Any]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tests-frozen-admin")
    try:
        yield admin
    finally:
        admin.close()


@pytest.mark.kafka
def test_frozen_broker_fails_readiness_not_liveness(
    kafka_broker_factory: Any, tmp_path: Path
) -> None:
    broker = kafka_broker_factory()
    bootstrap = broker.bootstrap
    prefix = new_prefix("frozen")
    with _admin(bootstrap) as admin:
        topics = make_topics(
            lambda partitions, *, prefix, config=None: create_topic(
                admin, unique_name(prefix), partitions, config=config
            ),
            prefix,
        )
    messages = list(sample_messages(N_BEFORE + N_AFTER, seed=44))
    before, after = messages[:N_BEFORE], messages[N_BEFORE:]
    produce(bootstrap, topics["input"], before)
    daemon = Daemon(
        bootstrap,
        topics,
        tmp_path,
        group=f"{prefix}-g",
        extra_env={
            # /healthz goes 503 if the loop stalls for 10 s: the freeze must not stall it
            "STREAMMOM_WORKER__HEARTBEAT_TIMEOUT_S": "10",
            # an idle daemon (nothing to flush): only the broker probe can see the freeze
            "STREAMMOM_WORKER__MODEL_PUBLISH_INTERVAL_S": "3600",
            "STREAMMOM_KAFKA__BROKER_PROBE_TIMEOUT_MS": str(PROBE_TIMEOUT_MS),
        },
    ).start()
    pid = broker.pid
    assert pid is not None
    frozen = False
    try:
        wait_until(
            lambda: daemon.get("/readyz")[0] == 200 and daemon.processed() >= N_BEFORE,
            120,
            message="ready and caught up",
        )
        health: list[int] = []

        def sample() -> int:
            daemon.alive()
            health.append(daemon.get("/healthz")[0])
            return daemon.get("/readyz")[0]

        os.kill(pid, signal.SIGSTOP)
        frozen = True
        t_freeze = time.monotonic()
        wait_until(lambda: sample() == 503, DETECT_S, interval=0.25,
                   message="/readyz 503 while the broker is frozen")
        detected_after = time.monotonic() - t_freeze
        # keep it frozen for a while: readiness stays down, liveness stays up
        ready_during: list[int] = []
        t_detect = time.monotonic()
        while time.monotonic() - t_detect < FREEZE_S:  # the scenario's duration, not a wait
            ready_during.append(sample())
            time.sleep(0.25)
        assert set(ready_during) == {503}, f"/readyz flapped while frozen: {set(ready_during)}"
        assert set(health) == {200}, f"/healthz not always 200 while frozen: {set(health)}"

        os.kill(pid, signal.SIGCONT)
        frozen = False
        wait_until(lambda: sample() == 200, 120, message="/readyz 200 after SIGCONT")
        assert set(health) == {200}, f"/healthz not always 200: {set(health)}"
        produce(bootstrap, topics["input"], after)
        wait_until(lambda: daemon.processed() >= N_BEFORE + N_AFTER, 120,
                   message=f"processed >= {N_BEFORE + N_AFTER} after the freeze")
        assert detected_after < DETECT_S
    finally:
        if frozen:
            os.kill(pid, signal.SIGCONT)
        code = daemon.stop()
    assert code == 0, daemon.log_tail()
