"""File and memory transports behind the port (the Kafka one runs in the integration tests)."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest

from service.file_transport import FileSink, FileSource
from service.memory_transport import MemoryBroker, MemorySink, MemorySource
from service.transport import Sink, Source, TransportError


def _memory_source(tmp_path: Path, values: list[bytes]) -> Source:
    broker = MemoryBroker()
    broker.create_topic("t")
    for v in values:
        broker.append("t", v)
    return MemorySource(broker, "t")


def _file_source(tmp_path: Path, values: list[bytes]) -> Source:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(v + b"\n" for v in values))
    return FileSource(path, name="t")


@pytest.mark.parametrize("make", [_memory_source, _file_source], ids=["memory", "file"])
def test_sources_keep_the_source_contract(tmp_path: Path, make) -> None:
    """What the worker relies on, for every in-process source: the partition is announced
    through ``on_assign`` before its first records, offsets are consecutive next-offset
    positions, ``seek`` rewinds, ``lag`` reaches 0 at the end, and ``close`` is idempotent."""
    values = [b'{"n":%d}' % i for i in range(5)]
    src = make(tmp_path, values)
    assert isinstance(src, Source)
    assigned: list[list] = []
    src.on_assign = assigned.append
    first = src.poll(3, 0.1)
    assert assigned and len(assigned[0]) == 1
    tp = assigned[0][0]
    assert src.assignment() == {tp}
    assert [(r.topic, r.partition) for r in first] == [tp] * len(first)
    assert [r.offset for r in first] == list(range(len(first))) and len(first) >= 1
    rest = src.poll(10, 0.1)
    got = first + rest
    while len(got) < len(values):
        more = src.poll(10, 0.1)
        assert more, "records were lost"
        got += more
    assert [r.value for r in got] == values
    assert [r.offset for r in got] == list(range(len(values)))
    assert src.lag().get(tp, 0) == 0
    src.seek({tp: 2})
    again = src.poll(10, 0.1)
    assert [r.offset for r in again] == [2, 3, 4] and [r.value for r in again] == values[2:]
    src.commit({tp: 5})
    src.close()
    src.close()


@pytest.mark.parametrize("make", [_memory_source, _file_source], ids=["memory", "file"])
def test_a_paused_source_returns_nothing_until_resumed_and_loses_nothing(tmp_path: Path,
                                                                         make) -> None:
    """The worker's backpressure: ``pause`` stops the records (polls go on, empty), ``resume``
    continues from where the source stood, every record once, in order."""
    values = [b'{"n":%d}' % i for i in range(6)]
    src = make(tmp_path, values)
    got = src.poll(2, 0.1)
    assert [r.offset for r in got] == [0, 1]
    src.pause()
    assert src.poll(10, 0.0) == [] and src.poll(10, 0.0) == []
    src.resume()
    src.resume()  # idempotent
    while len(got) < len(values):
        more = src.poll(10, 0.1)
        assert more, "records were lost"
        got += more
    assert [r.value for r in got] == values and [r.offset for r in got] == list(range(6))
    src.close()


def _memory_sink(tmp_path: Path):
    broker = MemoryBroker()
    broker.create_topic("out")
    return MemorySink(broker), lambda: [r.value for r in broker.records("out")]


def _file_sink(tmp_path: Path):
    path = tmp_path / "out.jsonl"
    sink = FileSink({"out": path})
    return sink, lambda: path.read_bytes().splitlines() if path.exists() else []


@pytest.mark.parametrize("make", [_memory_sink, _file_sink], ids=["memory", "file"])
def test_sinks_keep_the_sink_contract(tmp_path: Path, make) -> None:
    """``produce`` queues; after ``flush`` every message is delivered, in order, once."""
    sink, delivered = make(tmp_path)
    assert isinstance(sink, Sink)
    for i in range(3):
        sink.produce("out", b"k", b"v%d" % i, [("h", b"1")])
    sink.flush(1.0)
    assert delivered() == [b"v0", b"v1", b"v2"]
    sink.flush(1.0)
    sink.close()
    sink.close()
    assert delivered() == [b"v0", b"v1", b"v2"]


def test_file_source_offsets_are_line_numbers_and_seek(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"a":0}\n\n{"a":2}\r\n{"a":3}\n{"a":4}')
    src = FileSource(path)
    assigned: list = []
    src.on_assign = assigned.append
    recs = src.poll(2, 0.1)
    assert [(r.offset, r.value) for r in recs] == [(0, b'{"a":0}'), (2, b'{"a":2}')]
    assert assigned == [[(src.topic, 0)]]
    assert [r.offset for r in src.poll(10, 0.1)] == [3, 4] and src.exhausted
    again = FileSource(path)
    again.seek({(again.topic, 0): 3})
    assert [r.offset for r in again.poll(10, 0.1)] == [3, 4]


def test_file_source_pipe_does_not_block(tmp_path: Path) -> None:
    r, w = os.pipe()
    src = FileSource("-")
    src._fh = os.fdopen(r, "rb")  # stand-in for stdin
    os.write(w, b'{"x":1}\n{"x":')
    t0 = time.monotonic()
    assert [x.value for x in src.poll(10, 0.2)] == [b'{"x":1}']
    assert src.poll(10, 0.2) == [] and not src.exhausted
    assert time.monotonic() - t0 < 2
    os.write(w, b"2}\n")
    os.close(w)
    assert [(x.offset, x.value) for x in src.poll(10, 0.2)] == [(1, b'{"x":2}')]
    assert src.poll(10, 0.2) == [] and src.exhausted


def test_file_sink_routes_envelopes_and_replaces(tmp_path: Path) -> None:
    out, dlq, model = tmp_path / "out.jsonl", tmp_path / "dlq.jsonl", tmp_path / "m.smm"
    sink = FileSink({"a": out, "d": dlq, "m": model}, envelope_topics=["d"],
                    replace_topics=["m"])
    sink.produce("a", b"k", b'{"v":1}')
    sink.produce("d", b"k", b"\xff raw", [("dlq.reason", b"not_utf8")])
    sink.produce("m", b"k", b"model-1")
    sink.produce("m", b"k", b"model-2")
    sink.produce("unrouted", None, b"x")
    sink.flush(1.0)
    assert out.read_bytes() == b'{"v":1}\n'
    env = json.loads(dlq.read_text())
    assert base64.b64decode(env["value_b64"]) == b"\xff raw"
    assert env["headers"] == {"dlq.reason": "not_utf8"} and env["key"] == "k"
    assert model.read_bytes() == b"model-2" and sink.discarded == 1
    sink.close()


def test_memory_broker_down_raises_transport_error() -> None:
    broker = MemoryBroker()
    broker.create_topic("t", 2)
    src, sink = MemorySource(broker, "t"), MemorySink(broker)
    sink.produce("t", b"a", b"1")
    sink.flush(1.0)
    broker.down = True
    for call in (lambda: src.poll(1, 0), lambda: sink.flush(1.0), lambda: src.commit({})):
        try:
            call()
        except TransportError:
            continue
        raise AssertionError("expected TransportError")
    assert not src.connected()
