"""Kafka implementation of the transport port (kafka-python 3.0.x; the only module importing it).

* :class:`KafkaSource` — a ``KafkaConsumer`` in a consumer group, ``enable_auto_commit=False``,
  ``auto_offset_reset="earliest"``. A rebalance listener forwards assignments to the worker,
  which seeks the gained partitions to the offsets its state belongs to (checkpoint offsets after
  a restart). kafka-python 3 runs listeners on its IO thread, so the listener does nothing that
  blocks: ``seek`` only sets a position in the subscription state.
* :class:`KafkaSink` — a ``KafkaProducer`` with ``acks="all"``, idempotence and compression.
  Messages are kept until the broker acknowledged them; failed or unsent ones are re-sent by the
  next :meth:`KafkaSink.flush` (so an outage delays outputs but never drops them).
* :func:`ensure_topics` — create missing topics (the models topic compacted).

Every kafka-python error surfaces as :class:`service.transport.TransportError` (retried by the
worker with backoff); the client is created lazily and re-created after a failed bootstrap.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import errors as kerrors
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTP

from service.config import KafkaSettings, TopicsSettings
from service.transport import (
    AssignCallback,
    Headers,
    Record,
    TopicPartition,
    TransportError,
)

__all__ = ["KafkaSink", "KafkaSource", "ensure_topics"]

_log = logging.getLogger("streammom.kafka")


def _security(cfg: KafkaSettings) -> dict[str, Any]:
    out: dict[str, Any] = {"security_protocol": cfg.security_protocol}
    if cfg.sasl_mechanism:
        out["sasl_mechanism"] = cfg.sasl_mechanism
        out["sasl_plain_username"] = cfg.sasl_username
        out["sasl_plain_password"] = (
            cfg.sasl_password.get_secret_value() if cfg.sasl_password is not None else None
        )
    return out


def ensure_topics(cfg: KafkaSettings, topics: TopicsSettings) -> list[str]:
    """Create the missing input/output topics; the models topic with ``cleanup.policy=compact``.

    Returns the names created. Raises :class:`TransportError` when the broker is unreachable.
    """
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=f"{cfg.client_id}-admin",
            request_timeout_ms=cfg.request_timeout_ms,
            bootstrap_timeout_ms=cfg.max_block_ms,
            **_security(cfg),
        )
    except kerrors.KafkaError as exc:
        raise TransportError(f"admin client: {exc!r}") from exc
    try:
        existing = set(admin.list_topics())
        wanted: dict[str, dict[str, Any]] = {}
        for name in (topics.input, topics.assignments, topics.dead_letters):
            wanted[name] = {
                "num_partitions": cfg.topic_partitions,
                "replication_factor": cfg.replication_factor,
            }
        wanted[topics.models] = {
            "num_partitions": 1,
            "replication_factor": cfg.replication_factor,
            "configs": {"cleanup.policy": "compact"},
        }
        missing = {k: v for k, v in wanted.items() if k not in existing}
        if missing:
            admin.create_topics(missing, raise_errors=False, wait_for_metadata=True)
            _log.info("created topics", extra={"topics": sorted(missing)})
        return sorted(missing)
    except kerrors.KafkaError as exc:
        raise TransportError(f"ensure topics: {exc!r}") from exc
    finally:
        admin.close()


class _Listener(ConsumerRebalanceListener):
    """Forwards rebalances to the source's callbacks. Runs on kafka-python's IO thread."""

    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    def on_partitions_revoked(self, revoked: Any) -> None:
        tps = sorted((tp.topic, tp.partition) for tp in revoked)
        self._source._on_revoked(tps)

    def on_partitions_assigned(self, assigned: Any) -> None:
        tps = sorted((tp.topic, tp.partition) for tp in assigned)
        self._source._on_assigned(tps)


class KafkaSource:
    """Consume ``topic`` in consumer group ``cfg.group_id`` (see the module docstring)."""

    def __init__(self, cfg: KafkaSettings, topic: str, *, max_poll_records: int = 2000) -> None:
        self.cfg = cfg
        self.topic = topic
        self.max_poll_records = max_poll_records
        self.on_assign: AssignCallback | None = None
        self.on_revoke: AssignCallback | None = None
        self._consumer: KafkaConsumer | None = None
        self._assigned: set[TopicPartition] = set()
        self._assigned_lock = threading.Lock()  # mutated on the IO thread, read by /readyz
        self._positions: dict[TopicPartition, int] = {}
        self._closed = False
        self._last_commit: dict[Any, Any] | None = None
        self._down_since: float | None = None
        self._commit_error: BaseException | None = None

    # -------------------------------------------------------------- lifecycle
    def _ensure(self) -> KafkaConsumer:
        if self._consumer is not None:
            return self._consumer
        cfg = self.cfg
        try:
            consumer = KafkaConsumer(
                bootstrap_servers=cfg.bootstrap_servers,
                group_id=cfg.group_id,
                group_instance_id=cfg.group_instance_id,
                client_id=cfg.client_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=cfg.session_timeout_ms,
                heartbeat_interval_ms=cfg.heartbeat_interval_ms,
                max_poll_interval_ms=cfg.max_poll_interval_ms,
                request_timeout_ms=max(cfg.request_timeout_ms, cfg.session_timeout_ms + 1000),
                max_poll_records=self.max_poll_records,
                bootstrap_timeout_ms=cfg.max_block_ms,
                reconnect_backoff_max_ms=2000,
                **_security(cfg),
            )
            consumer.subscribe([self.topic], listener=_Listener(self))
        except kerrors.KafkaError as exc:
            raise TransportError(f"consumer: {exc!r}") from exc
        self._consumer = consumer
        return consumer

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._consumer is not None:
            if self._last_commit:
                mine = {tp: om for tp, om in self._last_commit.items()
                        if (tp.topic, tp.partition) in self._assigned}
                try:
                    if mine:
                        self._consumer.commit(offsets=mine, timeout_ms=5000)
                except Exception as exc:  # advisory: the checkpoint holds the offsets
                    _log.warning("final commit failed", extra={"error": repr(exc)})
            try:
                self._consumer.close(autocommit=False, timeout_ms=5000)
            except Exception as exc:
                _log.warning("consumer close failed", extra={"error": repr(exc)})

    # -------------------------------------------------------------- rebalance (IO thread)
    def _on_assigned(self, tps: list[TopicPartition]) -> None:
        with self._assigned_lock:
            self._assigned.update(tps)
        if self.on_assign is not None:
            self.on_assign(tps)

    def _on_revoked(self, tps: list[TopicPartition]) -> None:
        with self._assigned_lock:
            self._assigned.difference_update(tps)
        for tp in tps:
            self._positions.pop(tp, None)
        if self.on_revoke is not None:
            self.on_revoke(tps)

    # -------------------------------------------------------------- port
    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        consumer = self._ensure()
        try:
            batches = consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except kerrors.KafkaError as exc:
            raise TransportError(f"poll: {exc!r}") from exc
        out: list[Record] = []
        for tp, recs in batches.items():
            if not recs:
                continue
            out.extend(
                Record(
                    tp.topic,
                    tp.partition,
                    r.offset,
                    r.key,
                    r.value,
                    tuple(r.headers or ()),
                    r.timestamp,
                )
                for r in recs
            )
            self._positions[(tp.topic, tp.partition)] = recs[-1].offset + 1
        return out

    def assignment(self) -> set[TopicPartition]:
        with self._assigned_lock:
            return set(self._assigned)

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        consumer = self._ensure()
        for (topic, partition), offset in offsets.items():
            if (topic, partition) not in self._assigned:
                continue
            try:
                consumer.seek(KafkaTP(topic, partition), int(offset))
            except (ValueError, kerrors.KafkaError) as exc:  # unassigned meanwhile
                _log.warning("seek failed", extra={"partition": partition, "error": repr(exc)})
                continue
            self._positions[(topic, partition)] = int(offset)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit asynchronously (never blocks the loop, e.g. during an outage); the last
        requested offsets are committed synchronously, with a bounded wait, by :meth:`close`.
        A failure of an earlier async commit is raised here as :class:`TransportError`."""
        consumer = self._ensure()
        mine = {
            KafkaTP(t, p): OffsetAndMetadata(int(o), "", -1)  # -1: leader epoch unknown
            for (t, p), o in offsets.items()
            if (t, p) in self._assigned
        }
        error, self._commit_error = self._commit_error, None
        if mine:
            self._last_commit = mine
            try:
                consumer.commit_async(offsets=mine, callback=self._on_commit)
            except Exception as exc:  # commits are advisory: never let one kill the loop
                raise TransportError(f"commit: {exc!r}") from exc
        if error is not None:
            raise TransportError(f"commit: {error!r}")

    def _on_commit(self, offsets: Any, response: Any) -> None:
        if isinstance(response, BaseException):
            self._commit_error = response

    def lag(self) -> dict[TopicPartition, int]:
        if self._consumer is None:
            return {}
        out: dict[TopicPartition, int] = {}
        for tp in self.assignment():
            try:
                high = self._consumer.highwater(KafkaTP(*tp))
            except (kerrors.KafkaError, ValueError):
                continue
            pos = self._positions.get(tp)
            if high is not None and pos is not None:
                out[tp] = max(int(high) - pos, 0)
        return out

    def connected(self) -> bool:
        """Best-effort and non-blocking: is the group coordinator known and connected?

        Reads kafka-python's coordinator id and connection state (private API, guarded, and
        free of side effects — ``coordinator_unknown()`` would mark a still-connecting
        coordinator dead). Reports False only after 1 s of continuous disconnection, so a
        reconnect in progress does not flap readiness.
        """
        consumer = self._consumer
        if consumer is None:
            return False
        try:
            node = consumer._coordinator.coordinator_id
            up = node is not None and bool(consumer._client.connected(node))
        except AttributeError:  # another client version: no opinion
            return True
        except Exception:
            up = False
        now = time.monotonic()
        if up:
            self._down_since = None
            return True
        if self._down_since is None:
            self._down_since = now
        return now - self._down_since < 1.0


class KafkaSink:
    """Produce with ``acks="all"``, idempotence and compression; never drops a message."""

    def __init__(self, cfg: KafkaSettings) -> None:
        self.cfg = cfg
        self._producer: KafkaProducer | None = None
        self._inflight: list[tuple[Any, tuple[str, bytes | None, bytes | None, Headers]]] = []
        self._unsent: list[tuple[str, bytes | None, bytes | None, Headers]] = []
        self._closed = False

    def _ensure(self) -> KafkaProducer:
        if self._producer is not None:
            return self._producer
        cfg = self.cfg
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=cfg.bootstrap_servers,
                client_id=f"{cfg.client_id}-producer",
                acks="all",
                enable_idempotence=True,
                compression_type=cfg.compression_type,
                linger_ms=cfg.linger_ms,
                batch_size=256 * 1024,
                max_request_size=cfg.max_request_size,
                max_block_ms=cfg.max_block_ms,
                request_timeout_ms=cfg.request_timeout_ms,
                delivery_timeout_ms=max(120_000, cfg.request_timeout_ms + cfg.linger_ms + 1),
                bootstrap_timeout_ms=cfg.max_block_ms,
                reconnect_backoff_max_ms=2000,
                **_security(cfg),
            )
        except kerrors.KafkaError as exc:
            raise TransportError(f"producer: {exc!r}") from exc
        return self._producer

    def _send(self, msg: tuple[str, bytes | None, bytes | None, Headers]) -> None:
        topic, key, value, headers = msg
        producer = self._ensure()
        fut = producer.send(topic, value=value, key=key, headers=list(headers) or None)
        self._inflight.append((fut, msg))

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers = ()
    ) -> None:
        msg = (topic, key, value, tuple(headers))
        if self._unsent:  # broker known to be unreachable: queue, flush() retries
            self._unsent.append(msg)
            return
        try:
            self._send(msg)
        except (kerrors.KafkaError, TransportError) as exc:
            if not _retriable(exc):
                _drop(msg, exc)
                return
            self._unsent.append(msg)

    def flush(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        if self._unsent:
            unsent, self._unsent = self._unsent, []
            for i, msg in enumerate(unsent):
                try:
                    self._send(msg)
                except (kerrors.KafkaError, TransportError) as exc:
                    if not _retriable(exc):
                        _drop(msg, exc)
                        continue
                    self._unsent = unsent[i:]
                    raise TransportError(f"send: {exc!r}") from exc
        if not self._inflight:
            return
        producer = self._ensure()
        try:
            producer.flush(timeout=max(deadline - time.monotonic(), 0.1))
        except kerrors.KafkaError as exc:
            raise TransportError(f"flush: {exc!r}") from exc
        failed: list[tuple[str, bytes | None, bytes | None, Headers]] = []
        still: list[tuple[Any, tuple[str, bytes | None, bytes | None, Headers]]] = []
        first_error: BaseException | None = None
        for fut, msg in self._inflight:
            if not fut.is_done:
                still.append((fut, msg))
            elif fut.failed():
                exc = fut.exception
                if _retriable(exc):
                    failed.append(msg)
                    first_error = first_error or exc
                else:
                    _drop(msg, exc)
        self._inflight = still
        if failed:
            self._unsent = failed + self._unsent
        if failed or still:
            raise TransportError(f"delivery incomplete: {first_error!r}")

    @property
    def pending(self) -> int:
        """Messages not yet acknowledged."""
        return len(self._inflight) + len(self._unsent)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._producer is not None:
            try:
                self._producer.close(timeout=5)
            except Exception as exc:
                _log.warning("producer close failed", extra={"error": repr(exc)})


def _retriable(exc: BaseException | None) -> bool:
    """Everything is retried except a broker's definitive, non-retriable answer about a message
    (e.g. ``MessageSizeTooLargeError``, ``InvalidTopicError``, authorisation failures)."""
    if isinstance(exc, kerrors.BrokerResponseError):
        return bool(getattr(exc, "retriable", False))
    return True


def _drop(msg: tuple[str, bytes | None, bytes | None, Headers], exc: BaseException | None) -> None:
    topic, key, value, _ = msg
    _log.error(
        "dropping message after a non-retriable produce error",
        extra={"topic": topic, "key": key.decode("utf-8", "replace") if key else None,
               "bytes": len(value or b""), "error": repr(exc)},
    )
