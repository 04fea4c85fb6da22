"""The transport port: what the worker needs from a message broker, and nothing more.

Implementations: :mod:`service.kafka_source` and :mod:`service.kafka_sink` (kafka-python; with
:mod:`service.kafka_clients` the only modules that import it), :mod:`service.memory_transport`
(in-memory broker for unit tests) and :mod:`service.file_transport` (JSONL files / stdin /
stdout for the embedded mode).

Offsets are always *next* offsets (the offset of the next record to read), as in Kafka commits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = [
    "Headers",
    "Offsets",
    "Record",
    "Sink",
    "Source",
    "TopicPartition",
    "TopicReader",
    "TransportError",
    "flatten_offsets",
    "nest_offsets",
]

#: ``(topic, partition)``.
TopicPartition = tuple[str, int]
#: ``{(topic, partition): next_offset}``.
Offsets = dict[TopicPartition, int]
#: Kafka-style headers: a sequence of ``(name, value)`` pairs.
Headers = Sequence[tuple[str, bytes]]


class TransportError(RuntimeError):
    """A transient broker/IO failure: retried with backoff, never dead-lettered."""


class Record(NamedTuple):
    """One consumed message (a named tuple: built once per event on the hot path, it costs a
    third of a frozen dataclass)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int | None = None
    #: Why the client could not read this record (a corrupt batch, a header key that is not
    #: UTF-8); key and value are then None and the worker dead-letters it as ``unreadable``.
    unreadable: str | None = None


AssignCallback = Callable[[list[TopicPartition]], None]


@runtime_checkable
class Source(Protocol):
    """A partitioned, offset-addressed input (a Kafka consumer, a file, a fake).

    ``on_assign`` / ``on_revoke`` (set by the worker) are called with the partitions gained /
    lost. They may run on a client IO thread: they must not block.
    """

    on_assign: AssignCallback | None
    on_revoke: AssignCallback | None

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first."""
        ...

    def pause(self) -> None:
        """Stop returning records, from every partition assigned now or later, until
        :meth:`resume`; polls go on returning nothing, positions and group membership are
        kept (backpressure: the worker pauses while the events it holds are at their bound)."""
        ...

    def resume(self) -> None:
        """Return records again from where each partition stood (idempotent)."""
        ...

    def assignment(self) -> set[TopicPartition]:
        """Partitions currently assigned."""
        ...

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Continue each given (assigned) partition from its next offset."""
        ...

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Record next offsets durably in the broker (for lag monitoring and tools)."""
        ...

    def lag(self) -> dict[TopicPartition, int]:
        """Records not yet read per assigned partition (where known, without blocking)."""
        ...

    def topic_id(self) -> str | None:
        """The input topic's unique id (Kafka's topic UUID, KIP-516): it changes when the topic
        is deleted and recreated under the same name. None if unknown (blocking; start-up)."""
        ...

    def committed(self) -> dict[TopicPartition, int]:
        """Offsets the consumer group has committed for the input's partitions (blocking;
        called once at start-up, to tell a first start from a start whose state was lost)."""
        ...

    def close(self) -> None:
        """Release resources (idempotent)."""
        ...


@runtime_checkable
class Sink(Protocol):
    """An output for assignments, models and dead letters.

    ``produce`` queues; ``flush`` returns only when every queued message is acknowledged, or
    raises :class:`TransportError` (the sink keeps unacknowledged messages and re-sends them on
    the next ``flush``: nothing is dropped).
    """

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers = ()
    ) -> None:
        """Queue one message."""
        ...

    def flush(self, timeout: float) -> None:
        """Wait for every queued message to be acknowledged (raise TransportError if not)."""
        ...

    def close(self) -> None:
        """Flush what can be flushed and release resources (idempotent)."""
        ...


@runtime_checkable
class TopicReader(Protocol):
    """A whole topic read from its beginning, outside any consumer group (the models topic an
    ingest worker follows, the learner-state topic a learner restores from)."""

    def read(self, timeout_s: float) -> list[Record]:
        """The records that arrived since the last call (waiting at most ``timeout_s``)."""
        ...

    def caught_up(self) -> bool:
        """True when every partition has been read to its current end."""
        ...

    def close(self) -> None:
        """Release resources (idempotent)."""
        ...


def nest_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` → ``{t: {str(p): o}}`` (the JSON form stored in checkpoints)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def flatten_offsets(nested: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Inverse of :func:`nest_offsets` (validates types)."""
    out: Offsets = {}
    for topic, parts in nested.items():
        if not isinstance(topic, str) or not isinstance(parts, Mapping):
            raise ValueError("offsets must be {topic: {partition: offset}}")
        for partition, offset in parts.items():
            p = int(partition)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0 or p < 0:
                raise ValueError(f"bad offset {topic}[{partition}] = {offset!r}")
            out[(topic, p)] = offset
    return out
