"""``streammom produce-sample``: synthetic encounter events to a Kafka topic or a JSONL file."""

from __future__ import annotations

import time
from collections.abc import Iterator

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
) -> int:
    """Send the sample to Kafka (``bootstrap`` + ``topic``) or write it to ``output``
    (``-`` = stdout). ``rate`` limits events/s (0 = as fast as possible). Returns the count.

    The producer uses the ``[kafka]`` settings of ``kafka`` — by default the daemon's resolved
    configuration (``$STREAMMOM_CONFIG``, ``STREAMMOM_KAFKA__*``), so TLS/SASL settings apply
    to it too — with ``bootstrap`` as the bootstrap servers."""
    sent = 0
    start = time.monotonic()
    if output is not None:
        with binary_stream(output, "wb") as out:
            for _, value in sample_messages(events, seed=seed, malformed_every=malformed_every):
                out.write(value + b"\n")
                sent += 1
                _pace(start, sent, rate)
        return sent
    if bootstrap is None or topic is None:
        raise ValueError("give --bootstrap and --topic, or --output")
    from service.kafka_sink import KafkaSink
    from service.transport import TransportError

    sink = KafkaSink(_sample_kafka_settings(bootstrap, kafka))
    try:
        for key, value in sample_messages(events, seed=seed, malformed_every=malformed_every):
            sink.produce(topic, key, value)
            sent += 1
            if sent % 5000 == 0:
                _flush_retry(sink, TransportError)
            _pace(start, sent, rate)
        _flush_retry(sink, TransportError)
    finally:
        sink.close()
    return sent


def _sample_kafka_settings(bootstrap: str, kafka: KafkaSettings | None) -> KafkaSettings:
    """The producer's settings: ``kafka`` (default: the resolved configuration's ``[kafka]``,
    for its security settings) with ``bootstrap``, a 20 ms linger and its own client id."""
    if kafka is None:
        from service.config import load_settings

        kafka = load_settings().kafka
    return kafka.model_copy(update={"bootstrap_servers": bootstrap, "linger_ms": 20,
                                    "client_id": "streammom-sample"})


def _flush_retry(sink: object, error: type[Exception], attempts: int = 30) -> None:
    for i in range(attempts):
        try:
            sink.flush(10.0)  # type: ignore[attr-defined]
            return
        except error:
            if i == attempts - 1:
                raise
            time.sleep(min(0.2 * 2**i, 5.0))
