"""An in-memory broker behind the transport port (unit tests, the demo).

:class:`MemoryBroker` holds partitioned topics (append-only logs of :class:`Record`) and the
committed offsets per group. :class:`MemorySource` reads the input topic's partitions (all are
assigned at first poll; no rebalancing), :class:`MemorySink` appends. Failures can be injected
(``broker.down = True`` makes every call raise :class:`TransportError`).
"""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from collections.abc import Mapping

from service.transport import (
    AssignCallback,
    Headers,
    Record,
    TopicPartition,
    TransportError,
)

__all__ = ["MemoryBroker", "MemoryReader", "MemorySink", "MemorySource"]


class MemoryBroker:
    """Topics of partitions (lists of records) and committed offsets per group."""

    def __init__(self) -> None:
        self.topics: dict[str, list[list[Record]]] = {}
        self.topic_ids: dict[str, str] = {}
        self.committed: dict[str, dict[TopicPartition, int]] = {}
        self.down = False
        self.commit_log: list[tuple[str, dict[TopicPartition, int]]] = []
        self._lock = threading.Lock()

    def _check(self) -> None:
        if self.down:
            raise TransportError("memory broker is down")

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        """Create ``topic`` (no-op if it exists)."""
        with self._lock:
            if topic not in self.topics:
                self.topics[topic] = [[] for _ in range(partitions)]
                self.topic_ids[topic] = uuid.uuid4().hex

    def recreate_topic(self, topic: str, partitions: int = 1) -> None:
        """Delete ``topic`` and create it again, empty and with a new id (as Kafka does)."""
        with self._lock:
            self.topics.pop(topic, None)
            self.topic_ids.pop(topic, None)
        self.create_topic(topic, partitions)

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers = (),
        partition: int | None = None,
    ) -> Record:
        """Append one message (partition by key hash, else 0)."""
        self._check()
        with self._lock:
            parts = self.topics.setdefault(topic, [[]])
            if partition is None:
                partition = zlib.crc32(key) % len(parts) if key is not None else 0
            log = parts[partition]
            rec = Record(topic, partition, len(log), key, value, tuple(headers),
                         int(time.time() * 1000))
            log.append(rec)
            return rec

    def records(self, topic: str) -> list[Record]:
        """All records of a topic, partition by partition."""
        with self._lock:
            return [r for part in self.topics.get(topic, []) for r in part]

    def end_offsets(self, topic: str) -> dict[TopicPartition, int]:
        with self._lock:
            return {(topic, p): len(log) for p, log in enumerate(self.topics.get(topic, []))}


class MemorySource:
    """Consumes every partition of ``topic`` for consumer group ``group``."""

    def __init__(self, broker: MemoryBroker, topic: str, group: str = "streammom") -> None:
        self.broker = broker
        self.topic = topic
        self.group = group
        self.on_assign: AssignCallback | None = None
        self.on_revoke: AssignCallback | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._assigned = False
        self._rr = 0
        self.paused = False
        self.closed = False

    def _ensure_assigned(self) -> None:
        if self._assigned:
            return
        self.broker.create_topic(self.topic)
        n = len(self.broker.topics[self.topic])
        tps = [(self.topic, p) for p in range(n)]
        committed = self.broker.committed.get(self.group, {})
        self._positions = {tp: committed.get(tp, 0) for tp in tps}
        self._assigned = True
        if self.on_assign is not None:
            self.on_assign(tps)

    def rebalance(self) -> None:
        """An eager rebalance that gives this consumer its partitions back, as kafka-python 3
        does it: every partition revoked, then assigned again with its fetch position kept."""
        self._ensure_assigned()
        tps = sorted(self._positions)
        if self.on_revoke is not None:
            self.on_revoke(tps)
        if self.on_assign is not None:
            self.on_assign(tps)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        self.broker._check()
        self._ensure_assigned()
        out: list[Record] = []
        if self.paused:
            return out
        parts = self.broker.topics[self.topic]
        n = len(parts)
        # round-robin over partitions, a contiguous run per partition (like a fetch)
        for i in range(n):
            p = (self._rr + i) % n
            tp = (self.topic, p)
            pos = self._positions[tp]
            if pos > len(parts[p]):  # out of range: reset to earliest, as the Kafka source does
                pos = 0
            take = parts[p][pos : pos + (max_records - len(out))]
            out.extend(take)
            self._positions[tp] = pos + len(take)
            if len(out) >= max_records:
                break
        self._rr = (self._rr + 1) % max(n, 1)
        return out

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions) if self._assigned else set()

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, off in offsets.items():
            if tp in self._positions:
                self._positions[tp] = int(off)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.broker._check()
        with self.broker._lock:
            self.broker.committed.setdefault(self.group, {}).update(offsets)
            self.broker.commit_log.append((self.group, dict(offsets)))

    def topic_id(self) -> str | None:
        self.broker._check()
        return self.broker.topic_ids.get(self.topic)

    def committed(self) -> dict[TopicPartition, int]:
        self.broker._check()
        with self.broker._lock:
            mine = self.broker.committed.get(self.group, {})
            return {tp: off for tp, off in mine.items() if tp[0] == self.topic}

    def lag(self) -> dict[TopicPartition, int]:
        ends = self.broker.end_offsets(self.topic)
        return {tp: max(ends.get(tp, 0) - pos, 0) for tp, pos in self._positions.items()}

    def connected(self) -> bool:
        """False while the broker is down (like the Kafka source's coordinator probe)."""
        return not self.broker.down

    def close(self) -> None:
        if not self.closed and self._assigned and self.on_revoke is not None:
            self.on_revoke(sorted(self._positions))
        self.closed = True


class MemoryReader:
    """Reads every partition of ``topic`` from its beginning, outside any group."""

    def __init__(self, broker: MemoryBroker, topic: str) -> None:
        self.broker = broker
        self.topic = topic
        self._positions: dict[int, int] = {}

    def read(self, timeout_s: float) -> list[Record]:
        self.broker._check()
        with self.broker._lock:
            parts = self.broker.topics.get(self.topic, [])
            out: list[Record] = []
            for p, log in enumerate(parts):
                out.extend(log[self._positions.get(p, 0):])
                self._positions[p] = len(log)
        return out

    def caught_up(self) -> bool:
        self.broker._check()
        ends = self.broker.end_offsets(self.topic)
        return all(self._positions.get(p, 0) >= end for (_, p), end in ends.items())

    def close(self) -> None:
        return None


class MemorySink:
    """Appends to a :class:`MemoryBroker`; messages become visible on ``flush``."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self._pending: list[tuple[str, bytes | None, bytes | None, Headers]] = []
        self.flushes = 0
        self.closed = False

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers = ()
    ) -> None:
        self._pending.append((topic, key, value, tuple(headers)))

    def flush(self, timeout: float) -> None:
        self.broker._check()
        pending, self._pending = self._pending, []
        for topic, key, value, headers in pending:
            self.broker.append(topic, value, key=key, headers=headers)
        self.flushes += 1

    @property
    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        self.closed = True
