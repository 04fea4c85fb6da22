"""Helpers for the daemon integration tests: run ``streammom run`` as a subprocess against the
real broker, produce/consume with kafka-python, poll HTTP endpoints with deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_server import child_dies_with_parent, free_port

# Small, fast engine + frequent checkpoints: the integration suite must stay within minutes.
ENGINE_ENV = {
    "STREAMMOM_MODEL__VOCABULARY_CAPACITY": "128",
    "STREAMMOM_MODEL__MAX_DEPTH": "2",
    "STREAMMOM_MODEL__MAX_LEAVES": "4",
    "STREAMMOM_MODEL__MIN_SPLIT_WEIGHT": "200",
    "STREAMMOM_MODEL__REFIT_EVERY": "5000",
    "STREAMMOM_MODEL__RESERVOIR_SIZE": "256",
    "STREAMMOM_CHECKPOINT__EVERY_EVENTS": "4000",
    "STREAMMOM_CHECKPOINT__EVERY_SECONDS": "2",
    "STREAMMOM_WORKER__BATCH_MAX_RECORDS": "1000",
    "STREAMMOM_WORKER__MODEL_PUBLISH_INTERVAL_S": "5",
    "STREAMMOM_WORKER__BACKOFF_MAX_S": "1",
    "STREAMMOM_KAFKA__CREATE_TOPICS": "false",
}


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    *,
    interval: float = 0.2,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until truthy (returned) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {message}")
        time.sleep(interval)


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    """(status, body); (0, error) if the server does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, repr(exc)


def metric(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    """Sum of the samples ``name`` (matching ``labels``) in a text exposition."""
    values = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items())
    ]
    return sum(values) if values else None


def make_topics(factory: Callable[..., Any], prefix: str, *, partitions: int = 1) -> dict[str, str]:
    """Input/assignments/models (compacted)/dead-letter topics from ``kafka_topic_factory``."""
    return {
        "input": factory(partitions, prefix=f"{prefix}.events"),
        "assignments": factory(partitions, prefix=f"{prefix}.assignments"),
        "models": factory(1, prefix=f"{prefix}.models", config={"cleanup.policy": "compact"}),
        "dead_letters": factory(1, prefix=f"{prefix}.dlq"),
    }


def new_prefix(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def streammom_exe() -> str:
    return str(Path(sys.executable).with_name("streammom"))


class Daemon:
    """``streammom run`` in a subprocess, configured through the environment only."""

    def __init__(
        self,
        bootstrap: str,
        topics: dict[str, str],
        workdir: Path,
        *,
        group: str,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.topics = topics
        self.workdir = workdir
        self.state = workdir / "state"
        self.state.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "daemon.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMMOM_")}
        env.update(ENGINE_ENV)
        env.update(
            {
                "STREAMMOM_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
                "STREAMMOM_KAFKA__GROUP_ID": group,
                "STREAMMOM_TOPICS__INPUT": topics["input"],
                "STREAMMOM_TOPICS__ASSIGNMENTS": topics["assignments"],
                "STREAMMOM_TOPICS__MODELS": topics["models"],
                "STREAMMOM_TOPICS__DEAD_LETTERS": topics["dead_letters"],
                "STREAMMOM_CHECKPOINT__DIR": str(self.state),
                "STREAMMOM_HTTP__HOST": "127.0.0.1",
                "STREAMMOM_HTTP__PORT": str(self.port),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(extra_env or {})
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Daemon:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [streammom_exe(), "run"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.workdir,
                start_new_session=True,
                preexec_fn=child_dies_with_parent,
            )
        self.starts += 1
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.url + path)

    def alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}\n{self.log_tail()}")

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        status, body = self.get("/metrics")
        return metric(body, name, labels) if status == 200 else None

    def metrics_text(self) -> str:
        """The current ``/metrics`` exposition (fails if the endpoint does not answer 200)."""
        status, body = self.get("/metrics")
        assert status == 200, (status, body[:500])
        return body

    def processed(self) -> float:
        return self.metric("streammom_events_processed_total") or 0.0

    def processed_while_running(self) -> float:
        """:meth:`processed`, failing at once (with the log) if the daemon has exited — for
        waits that must not sit out their timeout on a dead process."""
        self.alive()
        return self.processed()

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait for the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
                raise AssertionError(f"daemon ignored SIGTERM\n{self.log_tail()}") from None
        return int(self.proc.returncode)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "--- daemon log (tail) ---\n" + "\n".join(text.splitlines()[-lines:])


def produce(
    bootstrap: str,
    topic: str,
    messages: Iterable[tuple[bytes | None, bytes]],
    *,
    partition: int | None = None,
) -> int:
    """Produce ``(key, value)`` messages in order (acks=all) and flush."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=20,
        batch_size=256 * 1024,
        max_request_size=1_048_576,
        max_block_ms=60_000,
    )
    n = 0
    try:
        for key, value in messages:
            producer.send(topic, key=key, value=value, partition=partition)
            n += 1
        producer.flush(120)
    finally:
        producer.close(timeout=10)
    return n


class TopicReader:
    """A group-less reader of every partition of a topic from the beginning (incremental)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=2 * 1024 * 1024,
        )
        parts = wait_until(
            lambda: self.consumer.partitions_for_topic(topic), 30, message=f"metadata of {topic}"
        )
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        self.consumer.assign(tps)
        self.consumer.seek_to_beginning(*tps)
        self.records: list[Any] = []

    def read(self, timeout_ms: int = 500) -> list[Any]:
        for recs in self.consumer.poll(timeout_ms=timeout_ms, max_records=50_000).values():
            self.records.extend(recs)
        return self.records

    def read_until(self, count: int, timeout: float) -> list[Any]:
        wait_until(
            lambda: len(self.read()) >= count,
            timeout,
            interval=0.05,
            message=f"{count} records (have {len(self.records)})",
        )
        return self.records

    def close(self) -> None:
        self.consumer.close(autocommit=False)


def assignment_ids(records: list[Any]) -> list[str]:
    return [json.loads(r.value)["event_id"] for r in records]
