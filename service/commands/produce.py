"""``streammom produce-sample``: synthetic encounter events to a Kafka topic or a JSONL file."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from service.commands.progress import count_progress
from service.commands.streams import binary_stream
from service.config import KafkaSettings

__all__ = ["produce_sample", "sample_messages"]


def sample_messages(
    events: int, *, seed: int = 0, malformed_every: int = 0
) -> Iterator[tuple[bytes | None, bytes]]:
    """``(key, value)`` of ``events`` synthetic events, plus one malformed message after every
    ``malformed_every`` valid ones (cycling through every dead-letter reason) if > 0."""
    from service.synthetic import generate_cohort, malformed_samples

    cohort = generate_cohort(events, seed=seed)
    bad = malformed_samples()
    for i, (codes_value, ev) in enumerate(zip(cohort.event_bytes(), cohort.events(),
                                             strict=True)):
        yield str(ev["entity_id"]).encode(), codes_value
        if malformed_every > 0 and (i + 1) % malformed_every == 0:
            yield None, bad[((i + 1) // malformed_every - 1) % len(bad)][1]


def _pace(start: float, sent: int, rate: float) -> None:
    if rate > 0:
        ahead = sent / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)


def produce_sample(
    *,
    events: int,
    topic: str | None = None,
    bootstrap: str | None = None,
    output: str | None = None,
    rate: float = 0.0,
    seed: int = 0,
    malformed_every: int = 0,
    kafka: KafkaSettings | None = None,
    timeout_s: float = 30.0,
    progress: bool = False,
) -> int:
    """Send the sample to Kafka (``bootstrap`` + ``topic``) or write it to ``output``
    (``-`` = stdout). ``rate`` limits events/s (0 = as fast as possible). Returns the count.

    The producer uses the ``[kafka]`` settings of ``kafka`` — by default the daemon's resolved
    configuration (``$STREAMMOM_CONFIG``, ``STREAMMOM_KAFKA__*``), so TLS/SASL settings apply
    to it too — with ``bootstrap`` as the bootstrap servers. A broker that does not answer
    within ``timeout_s`` (first contact, and each wait for acknowledgements) is a
    :class:`ConnectionError` naming the address, not minutes of silent retries."""
    messages = sample_messages(events, seed=seed, malformed_every=malformed_every)
    total = events + (events // malformed_every if malformed_every > 0 else 0)
    with count_progress("produce", total, progress) as advance:
        if output is not None:
            with binary_stream(output, "wb") as out:
                return _send(messages, lambda k, v: out.write(v + b"\n"), rate, advance)
        if bootstrap is None or topic is None:
            raise ValueError("give --bootstrap-servers and --topic, or --output")
        from service.kafka_clients import verify_connection
        from service.kafka_sink import KafkaSink
        from service.transport import TransportError

        settings = _sample_kafka_settings(bootstrap, kafka, timeout_s)
        unreachable = (f"cannot reach Kafka at {bootstrap} within {timeout_s:g} s (is the broker "
                       "running? check --bootstrap-servers and the [kafka] settings)")
        try:
            verify_connection(settings)
        except TransportError as exc:
            raise ConnectionError(f"{unreachable}: {exc}") from exc
        sink = KafkaSink(settings)
        deadline_s = timeout_s

        def send(key: bytes | None, value: bytes) -> None:
            sink.produce(topic, key, value)

        try:
            sent = _send(messages, send, rate, advance,
                         every=5000, flush=lambda: _flush(sink, deadline_s, unreachable))
            _flush(sink, deadline_s, unreachable)
        finally:
            sink.close()
        return sent


def _send(messages: Iterator[tuple[bytes | None, bytes]], send: Any, rate: float,
          advance: Any, *, every: int = 0, flush: Any = None) -> int:
    sent = 0
    start = time.monotonic()
    for key, value in messages:
        send(key, value)
        sent += 1
        if flush is not None and sent % every == 0:
            flush()
        advance()
        _pace(start, sent, rate)
    return sent


def _sample_kafka_settings(bootstrap: str, kafka: KafkaSettings | None,
                           timeout_s: float = 30.0) -> KafkaSettings:
    """The producer's settings: ``kafka`` (default: the resolved configuration's ``[kafka]``,
    for its security settings) with ``bootstrap``, a 20 ms linger, its own client id and
    ``timeout_s`` as the bound of a first contact."""
    if kafka is None:
        from service.config import load_settings

        kafka = load_settings().kafka
    return kafka.model_copy(update={"bootstrap_servers": bootstrap, "linger_ms": 20,
                                    "client_id": "streammom-sample",
                                    "max_block_ms": max(100, int(timeout_s * 1000))})


def _flush(sink: Any, timeout_s: float, unreachable: str) -> None:
    """Wait until the broker acknowledged everything, at most ``timeout_s``."""
    from service.transport import TransportError

    deadline = time.monotonic() + timeout_s
    delay = 0.2
    while True:
        try:
            sink.flush(min(10.0, max(0.1, deadline - time.monotonic())))
            return
        except TransportError as exc:
            if time.monotonic() >= deadline:
                raise ConnectionError(f"{unreachable}: {exc}") from exc
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 5.0)
