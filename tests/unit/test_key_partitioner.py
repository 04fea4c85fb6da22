"""The daemon's producer partitioner is Kafka's default layout (issue #14: the key hashes are
cached, never changed): a key lands where the Java client and kafka-python would put it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from kafka.partitioner import DefaultPartitioner
from kafka.partitioner.default import murmur2 as reference_murmur2

from service.key_partitioner import CachedKeyPartitioner, murmur2


def _cluster(partitions: set[int]) -> SimpleNamespace:
    return SimpleNamespace(topics=lambda: {"t"}, partitions_for_topic=lambda t: partitions,
                           available_partitions_for_topic=lambda t: partitions)


@pytest.mark.parametrize("max_keys", [4, 1 << 16])
def test_same_partition_as_the_default_partitioner(max_keys: int) -> None:
    rng = np.random.default_rng(0)
    keys = [bytes(rng.integers(0, 256, rng.integers(0, 40)).astype(np.uint8))
            for _ in range(300)] + [f"p{i}".encode() for i in range(300)]
    cached, default = CachedKeyPartitioner(max_keys=max_keys), DefaultPartitioner()
    for n in (1, 3, 7, 12):  # partitions grow: the sorted list follows
        cluster = _cluster(set(range(n)))
        for key in keys * 2:  # second pass: from the cache
            assert (cached.partition("t", key, key, None, None, cluster)
                    == default.partition("t", key, key, None, None, cluster)), (key, n)
    assert len(cached._hashes) <= max_keys


def test_unkeyed_records_and_unknown_topics() -> None:
    p = CachedKeyPartitioner()
    assert p.partition("t", None, None, b"v", b"v", _cluster({0, 1})) in {0, 1}
    with pytest.raises(ValueError, match="not found"):
        p.partition("t", b"k", b"k", None, None, _cluster(set()))


def test_compiled_murmur2_is_kafkas() -> None:
    """Every key length modulo 4 (the tail bytes), bytes ≥ 0x80 (no sign extension), empty,
    long, and a bytearray."""
    rng = np.random.default_rng(1)
    keys = [bytes(rng.integers(0, 256, n).astype(np.uint8)) for n in range(0, 70)
            for _ in range(20)] + [b"\xff" * 9, b"\x80\x00\x7f", bytes(range(256)) * 4]
    for key in keys:
        assert murmur2(key) == reference_murmur2(key), key
    assert murmur2(bytearray(b"p42")) == reference_murmur2(b"p42")
