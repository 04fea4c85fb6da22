"""A group-less reader of a whole topic (kafka-python): the models and learner-state topics.

Ingest workers follow the models topic and a learner that takes over reads the learner-state
topic from its beginning; neither belongs to a consumer group or commits anything: every
partition is assigned by hand and read from the earliest offset.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer
from kafka import errors as kerrors
from kafka.structs import TopicPartition as KafkaTP

from service.config import KafkaSettings
from service.kafka_clients import AuthWatch, build_client
from service.transport import Record, TransportError

__all__ = ["KafkaTopicReader"]


class KafkaTopicReader:
    """Read every partition of ``topic`` from its earliest offset (see the module docstring)."""

    def __init__(self, cfg: KafkaSettings, topic: str, *, client_suffix: str = "reader") -> None:
        self.cfg = cfg
        self.topic = topic
        self._suffix = client_suffix
        self._consumer: KafkaConsumer | None = None
        self._partitions: list[KafkaTP] = []
        self._auth = AuthWatch()

    def _ensure(self) -> KafkaConsumer:
        if self._consumer is not None:
            return self._consumer
        cfg = self.cfg
        consumer = build_client(
            "reader", KafkaConsumer, self._auth, cfg,
            bootstrap_servers=cfg.bootstrap_servers,
            group_id=None,
            client_id=f"{cfg.client_id}-{self._suffix}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=cfg.request_timeout_ms,
            bootstrap_timeout_ms=cfg.max_block_ms,
            reconnect_backoff_max_ms=2000,
        )
        try:
            parts = consumer.partitions_for_topic(self.topic) or set()
            self._partitions = [KafkaTP(self.topic, p) for p in sorted(parts)]
            consumer.assign(self._partitions)
            consumer.seek_to_beginning(*self._partitions)
        except kerrors.KafkaError as exc:
            consumer.close()
            raise TransportError(f"reader {self.topic}: {exc!r}") from exc
        if not self._partitions:
            consumer.close()
            raise TransportError(f"reader: topic {self.topic} has no partitions (yet)")
        self._consumer = consumer
        return consumer

    def read(self, timeout_s: float) -> list[Record]:
        """The records that arrived since the last call (waiting at most ``timeout_s``)."""
        consumer = self._ensure()
        try:
            batches: dict[Any, Any] = consumer.poll(timeout_ms=int(timeout_s * 1000))
        except kerrors.KafkaError as exc:
            raise TransportError(f"reader {self.topic}: {exc!r}") from exc
        return [Record(tp.topic, tp.partition, r.offset, r.key, r.value, tuple(r.headers or ()),
                       r.timestamp)
                for tp, recs in sorted(batches.items()) for r in recs]

    def caught_up(self) -> bool:
        """True when every partition has been read to its current end."""
        consumer = self._ensure()
        try:
            ends = consumer.end_offsets(self._partitions)
            return all(consumer.position(tp) >= ends[tp] for tp in self._partitions)
        except kerrors.KafkaError as exc:
            raise TransportError(f"reader {self.topic}: {exc!r}") from exc

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
