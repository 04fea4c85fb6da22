"""Kafka sink of the transport port: :class:`KafkaSink` (kafka-python 3.0.x).

A ``KafkaProducer`` with ``acks="all"``, idempotence and compression. Messages are kept until
the broker acknowledged them; failed or unsent ones are re-sent by the next
:meth:`KafkaSink.flush` (so an outage delays outputs but never drops them). The client is
created lazily and re-created after a failed bootstrap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaProducer
from kafka import errors as kerrors

from service.config import KafkaSettings
from service.kafka_clients import (
    AuthenticationError,
    AuthWatch,
    build_client,
    is_authentication_error,
)
from service.key_partitioner import CachedKeyPartitioner
from service.transport import (
    Headers,
    TransportError,
)

__all__ = ["KafkaSink", "producer_record_settings"]

#: The producer's per-partition batch size: large, so a batch of assignments goes out in few
#: requests (kafka-python's default is 16 KiB).
_BATCH_BYTES = 256 * 1024

_log = logging.getLogger("streammom.kafka")


def producer_record_settings(cfg: KafkaSettings) -> dict[str, Any]:
    """The producer settings that set its cost per record — acknowledgements, compression,
    linger, batch size — as :class:`KafkaSink` uses them (the benches' bare loop takes the
    same, so it differs from the daemon only in the daemon's own work)."""
    return {"acks": "all", "compression_type": cfg.compression_type,
            "linger_ms": cfg.linger_ms, "batch_size": _BATCH_BYTES}


class KafkaSink:
    """Produce with ``acks="all"``, idempotence and compression.

    Retriable failures (an outage) are kept and retried, never dropped. A message the broker or
    the producer definitively refuses (``_retriable`` is False: too large, topic not authorised,
    invalid topic) cannot succeed on retry and is dropped, but never silently: it is logged at
    error level, counted per topic in :attr:`dropped`, and reported to :attr:`on_drop` (the
    worker points it at ``streammom_messages_dropped_total{topic}``).
    """

    def __init__(self, cfg: KafkaSettings) -> None:
        self.cfg = cfg
        self._producer: KafkaProducer | None = None
        self._inflight: list[tuple[Any, tuple[str, bytes | None, bytes | None, Headers]]] = []
        self._unsent: list[tuple[str, bytes | None, bytes | None, Headers]] = []
        self._closed = False
        self._auth = AuthWatch()
        self.dropped: dict[str, int] = {}  # topic -> messages dropped (non-retriable errors)
        self.on_drop: Callable[[str], None] | None = None  # called with the topic of each drop

    def _drop(
        self, msg: tuple[str, bytes | None, bytes | None, Headers], exc: BaseException | None
    ) -> None:
        """Give up on ``msg`` after a non-retriable error: log, count, report."""
        _log_drop(msg, exc)
        topic = msg[0]
        self.dropped[topic] = self.dropped.get(topic, 0) + 1
        if self.on_drop is not None:
            try:
                self.on_drop(topic)
            except Exception as hook_exc:  # accounting must not turn a drop into a crash
                _log.warning("on_drop hook failed", extra={"error": repr(hook_exc)})

    def _ensure(self) -> KafkaProducer:
        if self._producer is not None:
            return self._producer
        cfg = self.cfg
        self._producer = build_client(
            "producer",
            KafkaProducer,
            self._auth,
            cfg,
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=f"{cfg.client_id}-producer",
            enable_idempotence=True,
            partitioner=CachedKeyPartitioner(),  # the default layout, key hashes remembered
            **producer_record_settings(cfg),
            max_request_size=cfg.max_request_size,
            max_block_ms=cfg.max_block_ms,
            request_timeout_ms=cfg.request_timeout_ms,
            delivery_timeout_ms=max(120_000, cfg.request_timeout_ms + cfg.linger_ms + 1),
            bootstrap_timeout_ms=cfg.max_block_ms,
            reconnect_backoff_max_ms=2000,
        )
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
                self._drop(msg, exc)
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
                        self._drop(msg, exc)
                        continue
                    self._unsent = unsent[i:]
                    if isinstance(exc, AuthenticationError):
                        raise
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
                    self._drop(msg, exc)
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
    (e.g. ``MessageSizeTooLargeError``, ``InvalidTopicError``, authorisation failures). A
    rejected login is about the connection, not the message: kept and retried."""
    if is_authentication_error(exc):
        return True
    if isinstance(exc, kerrors.BrokerResponseError):
        return bool(getattr(exc, "retriable", False))
    return True


def _log_drop(
    msg: tuple[str, bytes | None, bytes | None, Headers], exc: BaseException | None
) -> None:
    topic, key, value, _ = msg
    _log.error(
        "dropping message after a non-retriable produce error",
        extra={"topic": topic, "key": key.decode("utf-8", "replace") if key else None,
               "bytes": len(value or b""), "error": repr(exc)},
    )
