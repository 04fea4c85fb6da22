"""Kafka's default partitioning of keyed records, with the key hashes remembered.

Every assignment is keyed by its entity, so the producer hashes one key per event: murmur2 in
pure Python (kafka-python's ``DefaultPartitioner``) plus a sort of the topic's partitions each
time — about a sixth of the producer's cost per message in the daemon's profile (issue #14).
Entities recur (a patient has many encounters), so :class:`CachedKeyPartitioner` keeps the
hash of up to ``max_keys`` keys and the sorted partition list of each topic. The partition is
exactly the default one — ``murmur2(key) & 0x7fffffff`` modulo the partition count, indexing
the sorted partitions (the Java client's rule) — so every consumer that relies on a key's
partition sees the same layout; records without a key go to the default partitioner.
"""

from __future__ import annotations

from typing import Any

from kafka.partitioner import DefaultPartitioner, Partitioner
from kafka.partitioner.default import murmur2

__all__ = ["CachedKeyPartitioner"]


class CachedKeyPartitioner(Partitioner):  # type: ignore[misc]
    """``DefaultPartitioner`` with a bounded cache of key hashes (cleared when full).

    >>> from types import SimpleNamespace
    >>> cluster = SimpleNamespace(partitions_for_topic=lambda t: {0, 1, 2})
    >>> p = CachedKeyPartitioner()
    >>> p.partition("t", None, b"p42", None, None, cluster) == murmur2(b"p42") % 3
    True
    """

    def __init__(self, max_keys: int = 1 << 16) -> None:
        super().__init__()
        self.max_keys = max_keys
        self._hashes: dict[bytes, int] = {}
        self._sorted: dict[str, list[int]] = {}
        self._default = DefaultPartitioner()

    def partition(self, topic: str, key: Any, serialized_key: bytes | None, value: Any,
                  serialized_value: bytes | None, cluster: Any) -> int:
        if serialized_key is None:
            return int(self._default.partition(topic, key, serialized_key, value,
                                               serialized_value, cluster))
        partitions = cluster.partitions_for_topic(topic)
        if not partitions:
            raise ValueError(f"Topic {topic} not found in ClusterMetadata")
        ordered = self._sorted.get(topic)
        if ordered is None or len(ordered) != len(partitions):  # partitions only ever grow
            ordered = self._sorted[topic] = sorted(partitions)
        h = self._hashes.get(serialized_key)
        if h is None:
            if len(self._hashes) >= self.max_keys:
                self._hashes.clear()
            h = self._hashes[serialized_key] = murmur2(serialized_key) & 0x7FFFFFFF
        return ordered[h % len(ordered)]
