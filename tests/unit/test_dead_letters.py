"""What one bad message can do to the worker (issue #12, items 1, 5, 12, 13): nothing but a
dead letter. Event times follow one documented rule; the dead letter's ``dlq.*`` headers are
the worker's own; a record too large for the producer is dead-lettered as a truncated copy.
The same paths run on the real broker in tests/integration/test_daemon_poison.py."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from kafka import errors as kerrors
from memory_harness import IN, memory_worker, small_settings

from service.config import KafkaSettings, LimitsSettings
from service.events import EventDecoder, Rejection
from service.kafka_sink import KafkaSink
from service.memory_transport import MemoryBroker
from service.metrics import WorkerMetrics
from service.worker import Worker


def _event(ts: str, **extra: Any) -> bytes:
    body = {"type": "encounter", "id": "e1", "entity_id": "p1", "codes": ["I50.9"], **extra}
    raw = json.dumps(body)[:-1] + f', "ts": {ts}}}'
    return raw.encode()


# ------------------------------------------------------------------ item 1: poison messages
@pytest.mark.parametrize("ts", ["1" + "0" * 400, "-" + "9" * 400, "1e400", "-1e400"])
def test_absurd_numbers_are_rejected_not_raised(ts: str) -> None:
    out = EventDecoder().decode(_event(ts))
    assert isinstance(out, Rejection) and out.reason == "schema"
    assert "outside the accepted window" in out.error


def test_any_exception_while_decoding_is_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    decoder = EventDecoder()

    def explode(raw: bytes) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(decoder._adapter, "validate_json", explode)
    out = decoder.decode(_event("1767225600"))
    assert out == Rejection("schema", "RecursionError: maximum recursion depth exceeded")


# ------------------------------------------------------------------ item 12: one time rule
@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        ("1767225600", 1767225600.0),
        ("1767225600.25", 1767225600.25),
        ('"2026-01-01T00:00:00Z"', 1767225600.0),
        ('"2026-01-01T01:00:00+01:00"', 1767225600.0),
        ('"2026-01-01t00:00:00z"', 1767225600.0),
    ],
)
def test_accepted_times(ts: str, expected: float) -> None:
    event = EventDecoder().decode(_event(ts))
    assert not isinstance(event, Rejection), event
    assert event.ts == expected


@pytest.mark.parametrize(
    ("ts", "why"),
    [
        ('"1767225600"', "got the string"),            # numeric string: not a number
        ('"1767225600000"', "got the string"),         # ...nor milliseconds
        ("1767225600000", "not milliseconds"),         # ms as a number: year ~57,970
        ("-1", "outside the accepted window"),
        ('"2026-01-01T00:00:00"', "has no offset"),
        ('"2026-02-30T00:00:00Z"', "not a valid date-time"),
        ('"9999-12-31T00:00:00Z"', "outside the accepted window"),
        ("true", "valid number"),
    ],
)
def test_rejected_times(ts: str, why: str) -> None:
    out = EventDecoder().decode(_event(ts))
    assert isinstance(out, Rejection) and out.reason == "schema", out
    assert why in out.error


def test_the_time_window_is_a_setting() -> None:
    limits = LimitsSettings(min_ts=1_700_000_000, max_ts=1_800_000_000)
    assert isinstance(EventDecoder(limits).decode(_event("1690000000")), Rejection)
    assert not isinstance(EventDecoder(limits).decode(_event("1767225600")), Rejection)
    with pytest.raises(ValueError, match="min_ts"):
        LimitsSettings(min_ts=10, max_ts=5)


# ------------------------------------------------------------------ items 5 and 13: the DLQ
def _worker(tmp_path: Path, broker: MemoryBroker, **kafka: Any) -> Worker:
    settings = small_settings(tmp_path, kafka=kafka, worker={"batch_max_records": 100})
    return memory_worker(settings, broker)


def test_a_senders_dlq_headers_cannot_pass_for_the_real_ones(tmp_path: Path) -> None:
    broker = MemoryBroker()
    broker.create_topic(IN)
    spoofed = [("dlq.reason", b"spoofed"), ("DLQ.error", b"fake"), ("trace", b"t1")]
    broker.append(IN, b"{not json", key=b"k", headers=spoofed)
    worker = _worker(tmp_path, broker)
    assert worker.run() == 0
    [letter] = broker.records(worker.topics.dead_letters)
    names = [name for name, _ in letter.headers]
    assert names[0] == "dlq.reason" and dict(letter.headers)["dlq.reason"] == b"invalid_json"
    assert names.count("dlq.reason") == 1 and "DLQ.error" not in names
    assert dict(letter.headers)["input.dlq.reason"] == b"spoofed"
    assert dict(letter.headers)["input.DLQ.error"] == b"fake"
    assert dict(letter.headers)["trace"] == b"t1"
    assert letter.value == b"{not json" and letter.key == b"k"


def test_a_record_too_large_for_the_producer_is_dead_lettered_truncated(tmp_path: Path) -> None:
    broker = MemoryBroker()
    broker.create_topic(IN)
    huge = b'{"type": "encounter", "pad": "' + b"x" * 300_000 + b'"}'
    broker.append(IN, huge, key=b"big")
    good = _event("1767225600")
    broker.append(IN, good, key=b"p1")
    worker = _worker(tmp_path, broker, max_request_size=65_536)
    assert worker.run() == 0
    [letter] = broker.records(worker.topics.dead_letters)
    headers = dict(letter.headers)
    assert headers["dlq.reason"] == b"oversized"
    assert headers["dlq.truncated"] == b"true"
    assert headers["dlq.original.bytes"] == str(len(huge)).encode()
    assert headers["dlq.original.sha256"] == hashlib.sha256(huge).hexdigest().encode()
    size = len(letter.value) + len(letter.key or b"") + sum(
        len(n) + len(v) for n, v in letter.headers)
    assert size <= 65_536 - 4096 and huge.startswith(letter.value) and len(letter.value) > 0
    assert worker.counters["processed"] == 1  # the loop went on


def test_a_small_dead_letter_is_not_truncated(tmp_path: Path) -> None:
    broker = MemoryBroker()
    broker.create_topic(IN)
    broker.append(IN, b"\xff\xfe", key=b"k")
    worker = _worker(tmp_path, broker)
    assert worker.run() == 0
    [letter] = broker.records(worker.topics.dead_letters)
    assert letter.value == b"\xff\xfe" and "dlq.truncated" not in dict(letter.headers)


def _producer_size(letter: Any) -> int:
    """The size kafka-python's ``KafkaProducer.send`` checks against ``max_request_size``."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    return int(DefaultRecordBatchBuilder.estimate_size_in_bytes(
        letter.key, letter.value, list(letter.headers)))


@pytest.mark.parametrize(
    ("headers", "value_bytes"),
    [
        # 20,000 one-letter headers: 20 kB of names, 60 kB once each is framed
        ([("h", b"")] * 20_000, 1_000_000),
        # multi-byte header names: len(name) counts characters, the producer counts bytes
        ([("\U0001f600" * 1000, b"")] * 60, 1_000_000),
    ],
    ids=["many-tiny-headers", "non-ascii-header-names"],
)
def test_a_dead_letter_fits_the_producer_whatever_the_senders_headers(
    tmp_path: Path, headers: list[tuple[str, bytes]], value_bytes: int
) -> None:
    """The dead letter must pass ``KafkaProducer.send``'s size check (else it is dropped)."""
    broker = MemoryBroker()
    broker.create_topic(IN)
    value = b'{"type": "encounter", "pad": "' + b"x" * value_bytes + b'"}'
    broker.append(IN, value, key=b"k", headers=headers)
    broker.append(IN, _event("1767225600"), key=b"p1")
    worker = _worker(tmp_path, broker)  # kafka.max_request_size: the default, 1 MiB
    assert worker.run() == 0
    [letter] = broker.records(worker.topics.dead_letters)
    assert _producer_size(letter) <= worker.settings.kafka.max_request_size
    got = dict(letter.headers)
    assert got["dlq.reason"] == b"oversized" and got["dlq.truncated"] == b"true"
    assert got["dlq.original.sha256"] == hashlib.sha256(value).hexdigest().encode()
    assert value.startswith(letter.value) and len(letter.value) > 500_000
    assert [n for n, _ in letter.headers].count(headers[0][0]) == len(headers)  # all carried
    assert worker.counters["processed"] == 1


def test_a_dead_letter_with_many_headers_is_within_the_budget(tmp_path: Path) -> None:
    """Headers that could not fit beside any value are replaced by a count of them."""
    broker = MemoryBroker()
    broker.create_topic(IN)
    broker.append(IN, b"{not json", key=b"k", headers=[("h", b"")] * 200_000)
    worker = _worker(tmp_path, broker, max_request_size=262_144)
    assert worker.run() == 0
    [letter] = broker.records(worker.topics.dead_letters)
    assert _producer_size(letter) <= 262_144
    got = dict(letter.headers)
    assert got["dlq.input.headers.dropped"] == b"200000" and got["dlq.reason"] == b"invalid_json"
    assert letter.value == b"{not json"


# ------------------------------------------------------------------ the sink: never silent
class _Future:
    """A settled kafka-python produce future."""

    def __init__(self, exc: BaseException | None = None) -> None:
        self.is_done = True
        self.exception = exc

    def failed(self) -> bool:
        return self.exception is not None


class _Producer:
    """Refuses records over 100 bytes in ``send`` (as ``KafkaProducer`` does over
    ``max_request_size``) and fails delivery to the topic ``denied`` (a broker's answer)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None]] = []

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: Any = None) -> _Future:
        if len(value or b"") > 100:
            raise kerrors.MessageSizeTooLargeError("The message is 1000 bytes when serialized")
        if topic == "denied":
            return _Future(kerrors.TopicAuthorizationFailedError())
        self.sent.append((topic, value))
        return _Future()

    def flush(self, timeout: float | None = None) -> None:
        return None


def test_a_message_the_sink_drops_is_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A non-retriable produce error drops the message (retrying cannot help), but never
    silently: an error log line, ``KafkaSink.dropped`` per topic, and the ``on_drop`` hook
    (which the worker points at ``streammom_messages_dropped_total{topic}``)."""
    metrics = WorkerMetrics()
    sink = KafkaSink(KafkaSettings())
    sink._producer = _Producer()  # type: ignore[assignment]
    sink.on_drop = lambda topic: metrics.messages_dropped.labels(topic=topic).inc()
    caplog.set_level(logging.ERROR, logger="streammom.kafka")
    sink.produce("dlq", b"k", b"x" * 1000, [("dlq.reason", b"oversized")])  # fails in send()
    sink.produce("denied", b"k", b"small")                                  # fails on delivery
    sink.produce("dlq", b"k", b"fine")
    sink.flush(1.0)  # a dropped message is not an outage: nothing raised, nothing pending
    assert sink.pending == 0
    assert sink._producer.sent == [("dlq", b"fine")]  # type: ignore[attr-defined]
    assert sink.dropped == {"dlq": 1, "denied": 1}
    text = metrics.exposition().decode()
    assert 'streammom_messages_dropped_total{topic="dlq"} 1.0' in text
    assert 'streammom_messages_dropped_total{topic="denied"} 1.0' in text
    dropped = [r for r in caplog.records if "dropping message" in r.getMessage()]
    assert sorted(r.topic for r in dropped) == ["denied", "dlq"]  # type: ignore[attr-defined]
