"""Frames: the compact messages ingest workers forward to the learner (design §6, scale-out).

One frame carries the valid events an ingest worker read from ONE input partition in one
batch: their features, timestamps and input offsets, and the offset range ``[start, end)``
the batch covered (dead-lettered records included, so consecutive frames of a partition tile
its log without gaps). The learner keeps, per input partition, the watermark ``end`` of the
last frame it learned and learns an event only if its offset is at or past that watermark: a
frame produced twice (an ingest worker that died after producing but before committing, a
rebalance) is learned once — exactly-once learning over at-least-once frames.

The value is JSON (the producer compresses the batch); keys are the input partition
(``"<topic>/<partition>"``) so a tool can tell frames apart. Decoding validates everything: a
frame is data from a topic, never trusted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "FRAME_CONTENT_TYPE",
    "Frame",
    "FrameError",
    "decode_frame",
    "encode_frame",
]

FRAME_CONTENT_TYPE = b"application/vnd.streammom.frame+json"
FRAME_SCHEMA_VERSION = 1
_FIELDS = ("v", "topic", "partition", "start", "end", "offsets", "ts", "features")


class FrameError(ValueError):
    """A frame that cannot be decoded or is inconsistent (the learner dead-letters it)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """The valid events of one input partition's offset range ``[start, end)``."""

    topic: str
    partition: int
    start: int
    end: int
    offsets: np.ndarray  # (n,) int64, strictly increasing, within [start, end)
    ts: np.ndarray  # (n,) float64, epoch seconds
    features: list[list[str] | dict[str, int]]

    @property
    def source(self) -> tuple[str, int]:
        """The input partition ``(topic, partition)``."""
        return self.topic, self.partition

    def since(self, watermark: int) -> Frame:
        """The events at or past ``watermark`` (the learner's next offset for this partition).

        >>> f = decode_frame(encode_frame("in", 0, 10, 14, [10, 12, 13], [1.0, 2.0, 3.0],
        ...                               [["a"], ["b"], ["c"]]))
        >>> f.since(12).offsets.tolist(), f.since(12).features
        ([12, 13], [['b'], ['c']])
        """
        if watermark <= self.start:
            return self
        i = int(np.searchsorted(self.offsets, watermark, side="left"))
        return Frame(self.topic, self.partition, max(self.start, watermark), self.end,
                     self.offsets[i:], self.ts[i:], self.features[i:])


def encode_frame(
    topic: str,
    partition: int,
    start: int,
    end: int,
    offsets: Sequence[int],
    ts: Sequence[float],
    features: Sequence[list[str] | dict[str, int]],
) -> bytes:
    """The frame value of the valid events of ``topic[partition]`` in ``[start, end)``."""
    return json.dumps(
        {"v": FRAME_SCHEMA_VERSION, "topic": topic, "partition": partition, "start": start,
         "end": end, "offsets": list(offsets), "ts": list(ts), "features": list(features)},
        separators=(",", ":"), ensure_ascii=False, allow_nan=False,
    ).encode()


def _int(obj: dict[str, Any], name: str) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FrameError(f"frame field {name!r} must be a non-negative integer")
    return value


def decode_frame(value: bytes | None) -> Frame:
    """Parse and validate a frame; :class:`FrameError` says what is wrong.

    Checks the schema version, the field types, that ``offsets``, ``ts`` and ``features`` have
    one entry per event, that offsets increase strictly within ``[start, end)`` and that the
    timestamps are finite. Feature lists are checked by the vocabulary when they are learned.
    """
    if value is None:
        raise FrameError("empty frame")
    try:
        obj = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FrameError(f"frame is not JSON: {exc}") from None
    if not isinstance(obj, dict) or set(obj) != set(_FIELDS):
        raise FrameError(f"a frame is an object with exactly the fields {list(_FIELDS)}")
    if obj["v"] != FRAME_SCHEMA_VERSION:
        raise FrameError(f"frame schema version {obj['v']!r} is not {FRAME_SCHEMA_VERSION}")
    topic = obj["topic"]
    if not isinstance(topic, str) or not topic:
        raise FrameError("frame field 'topic' must be a non-empty string")
    partition, start, end = _int(obj, "partition"), _int(obj, "start"), _int(obj, "end")
    offsets, ts, features = obj["offsets"], obj["ts"], obj["features"]
    if not (isinstance(offsets, list) and isinstance(ts, list) and isinstance(features, list)):
        raise FrameError("frame fields 'offsets', 'ts' and 'features' must be lists")
    if not len(offsets) == len(ts) == len(features):
        raise FrameError("frame lists 'offsets', 'ts' and 'features' differ in length")
    try:
        off = np.asarray(offsets, dtype=np.int64).reshape(len(offsets))
        times = np.asarray(ts, dtype=np.float64).reshape(len(ts))
    except (TypeError, ValueError, OverflowError) as exc:
        raise FrameError(f"frame offsets/ts are not numbers: {exc}") from None
    if start > end or (off.size and (off[0] < start or off[-1] >= end
                                     or np.any(np.diff(off) <= 0))):
        raise FrameError("frame offsets must increase strictly within [start, end)")
    if not np.all(np.isfinite(times)):
        raise FrameError("frame timestamps must be finite")
    return Frame(topic, partition, start, end, off, times, features)
