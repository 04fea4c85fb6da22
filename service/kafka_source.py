"""Kafka source of the transport port: :class:`KafkaSource` (kafka-python 3.0.x).

A ``KafkaConsumer`` in a consumer group, ``enable_auto_commit=False``,
``auto_offset_reset="earliest"``. A rebalance listener forwards assignments to the worker, which
seeks the gained partitions to the offsets its state belongs to (checkpoint offsets after a
restart). kafka-python 3 runs listeners on its IO thread, so the listener does nothing that
blocks: ``seek`` only sets a position in the subscription state. The client is created lazily
and re-created after a failed bootstrap (:func:`service.kafka_clients.build_client`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka import errors as kerrors
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTP

from service.config import KafkaSettings
from service.kafka_clients import AuthenticationError, AuthWatch, build_client
from service.transport import (
    AssignCallback,
    Record,
    TopicPartition,
    TransportError,
)

__all__ = ["KafkaSource"]

_log = logging.getLogger("streammom.kafka")


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
        self._paused = False
        self._closed = False
        self._last_commit: dict[Any, Any] | None = None
        self._down_since: float | None = None
        self._commit_error: BaseException | None = None
        self._probe_timeout_s = cfg.broker_probe_timeout_ms / 1000
        self._auth = AuthWatch()
        self.probe_error: TransportError | None = None  # why connected() is False (the log)

    # -------------------------------------------------------------- lifecycle
    def _ensure(self) -> KafkaConsumer:
        if self._consumer is not None:
            return self._consumer
        cfg = self.cfg
        consumer = build_client(
            "consumer",
            KafkaConsumer,
            self._auth,
            cfg,
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
        )
        try:
            consumer.subscribe([self.topic], listener=_Listener(self))
        except kerrors.KafkaError as exc:
            consumer.close(autocommit=False)
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
        if self._paused and self._consumer is not None:  # gained while paused: paused too
            self._consumer.pause(*(KafkaTP(t, p) for t, p in tps))
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
    def pause(self) -> None:
        """``KafkaConsumer.pause`` of every assigned partition, and of every partition assigned
        later (at the rebalance, :meth:`_on_assigned`, and before each poll). The client keeps
        what it had fetched for them and returns it after :meth:`resume`."""
        self._paused = True
        if self._consumer is not None:
            self._pause_assigned(self._consumer)

    def resume(self) -> None:
        self._paused = False
        consumer = self._consumer
        paused = consumer.paused() if consumer is not None else set()
        if consumer is not None and paused:
            consumer.resume(*paused)

    @staticmethod
    def _pause_assigned(consumer: KafkaConsumer) -> None:
        unpaused = consumer.assignment() - consumer.paused()
        if unpaused:
            consumer.pause(*unpaused)

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        consumer = self._ensure()
        if self._paused:
            self._pause_assigned(consumer)
        try:
            batches = consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except kerrors.CorruptRecordError as exc:
            return self._skip_unreadable(consumer, exc)
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

    def _skip_unreadable(self, consumer: KafkaConsumer, exc: BaseException) -> list[Record]:
        """Step over a record the client cannot parse and return it as ``unreadable``.

        kafka-python raises :class:`~kafka.errors.CorruptRecordError` for a batch that fails
        its CRC or a record it cannot decode (e.g. a header key that is not UTF-8), and keeps
        its position on that record, so every later poll raises again and the partition is
        blocked for good. The partition and offset are those of the record stream that raised
        (the fetcher's in-line records: kafka-python 3.0, pinned in ``pyproject.toml``). The
        position moves one past it, so a corrupt batch costs one dead letter per record.
        If the client does not say where it failed, the error is raised as a
        :class:`TransportError` (retried as before).
        """
        part = getattr(getattr(consumer, "_fetcher", None), "_next_partition_records", None)
        ktp = getattr(part, "topic_partition", None)
        offset = getattr(part, "next_fetch_offset", None)
        if ktp is None or not isinstance(offset, int):
            raise TransportError(f"poll: {exc!r}") from exc
        part.drain()
        try:
            consumer.seek(ktp, offset + 1)
        except ValueError as seek_exc:  # revoked meanwhile: its next owner meets the record
            raise TransportError(f"poll: {exc!r}") from seek_exc
        tp = (ktp.topic, ktp.partition)
        self._positions[tp] = offset + 1
        _log.error("skipping a record the Kafka client cannot read",
                   extra={"partition": ktp.partition, "offset": offset, "error": repr(exc)})
        return [Record(ktp.topic, ktp.partition, offset, None, None,
                       unreadable=f"{type(exc).__name__}: {exc}"[:512])]

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

    def topic_id(self) -> str | None:
        """The input topic's UUID from the cluster metadata (MetadataResponse v10+, Kafka ≥ 2.8;
        None on older brokers or an unknown topic)."""
        consumer = self._ensure()
        try:
            if not consumer.partitions_for_topic(self.topic):
                return None
            tid = consumer._client.cluster.topic_id(self.topic)
        except AttributeError:  # another client version: no topic ids
            return None
        except kerrors.KafkaError as exc:
            raise TransportError(f"topic metadata: {exc!r}") from exc
        return None if tid is None or int(tid) == 0 else str(tid)  # 0: Kafka's "no id"

    def committed(self) -> dict[TopicPartition, int]:
        """The group's committed offsets for every partition of the input topic (blocking,
        bounded by ``request_timeout_ms`` per partition; start-up only)."""
        consumer = self._ensure()
        timeout_ms = self.cfg.request_timeout_ms
        out: dict[TopicPartition, int] = {}
        try:
            for p in sorted(consumer.partitions_for_topic(self.topic)):
                offset = consumer.committed(KafkaTP(self.topic, p), timeout_ms=timeout_ms)
                if offset is not None and offset >= 0:
                    out[(self.topic, p)] = int(offset)
        except kerrors.KafkaError as exc:
            raise TransportError(f"committed offsets: {exc!r}") from exc
        return out

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
        """Best-effort and non-blocking: does the group coordinator answer?

        False when the coordinator is unknown or disconnected, or when a group heartbeat sent
        to it has had no response for ``broker_probe_timeout_ms`` — a frozen broker (SIGSTOP,
        a stuck JVM) keeps its TCP connections open, so the connection state alone stays
        "connected" until the request times out (``request_timeout_ms``, 30 s+). The heartbeat
        runs every ``heartbeat_interval_ms`` on kafka-python's IO thread, whatever the worker
        loop is doing, so this costs no request of its own and blocks nothing.

        Reads kafka-python's coordinator and heartbeat state (private API, guarded: another
        client version gives no opinion; free of side effects — ``coordinator_unknown()`` would
        mark a still-connecting coordinator dead). Reports False only after 1 s of continuous
        trouble, so a reconnect in progress does not flap readiness; :attr:`probe_error` says
        what is wrong (an :class:`AuthenticationError` if a reconnection's login was rejected).
        """
        consumer = self._consumer
        failure = self._auth.failure
        if failure is not None:
            error: TransportError | None = AuthenticationError(
                f"authentication failed: {failure!r}")
        else:
            detail = "consumer not created yet" if consumer is None else (
                _coordinator_problem(consumer)
                or _heartbeat_problem(consumer, self._probe_timeout_s)
            )
            error = None if detail is None else TransportError(detail)
        self.probe_error = error
        now = time.monotonic()
        if error is None:
            self._down_since = None
            return True
        if consumer is None:
            return False
        if self._down_since is None:
            self._down_since = now
        return now - self._down_since < 1.0


def _coordinator_problem(consumer: Any) -> str | None:
    """Why the group coordinator is not usable (unknown, disconnected), or None."""
    try:
        coordinator = consumer._coordinator
        client = consumer._client
        node = coordinator.coordinator_id
        if node is None:
            return "group coordinator unknown"
        if not client.connected(node):
            return f"not connected to the group coordinator (node {node})"
    except AttributeError:  # another client version: no opinion
        return None
    except Exception as exc:
        return f"coordinator state unavailable: {exc!r}"
    return None


def _heartbeat_problem(consumer: Any, timeout_s: float) -> str | None:
    """A heartbeat is in flight without a response for more than ``timeout_s``, or None.

    kafka-python's ``Heartbeat`` records ``last_send`` before a request and ``last_receive``
    after its response; a heartbeat disabled by a rebalance (partitions revoked anyway) or a
    missing attribute (another client version) gives no opinion.
    """
    try:
        coordinator = consumer._coordinator
        beat = coordinator.heartbeat
        sent, received = float(beat.last_send), float(beat.last_receive)
        enabled = bool(getattr(coordinator, "_heartbeat_enabled", True))
    except (AttributeError, TypeError, ValueError):
        return None
    waited = time.monotonic() - sent
    if enabled and sent > received and waited > timeout_s:
        return f"no response to a group heartbeat for {waited:.1f} s"
    return None
