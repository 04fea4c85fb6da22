"""Files behind the transport port: the embedded mode (JSONL in, JSONL out, no broker).

* :class:`FileSource` reads one JSONL file (or stdin, ``-``) as a single partition ``0`` of the
  topic ``name``; the "offset" of a record is its 0-based line number, so checkpoints and
  restarts work exactly as with Kafka (seeking forward skips already-counted lines). Blank lines
  are skipped (they keep their line number). Pipes and terminals are read without blocking past
  the poll timeout, so ``tail -f events.jsonl | streammom run --input -`` streams.
* :class:`FileSink` routes topics to files: plain topics (assignments) are written one value per
  line; "envelope" topics (dead letters) are wrapped as ``{"key", "headers", "value_b64"}`` so
  the original bytes survive; the models topic may go to a file that is replaced atomically.
  ``flush`` flushes and (for regular files) fsyncs, so outputs are durable before a checkpoint.
  Messages for topics without a route are discarded (e.g. no ``--dead-letters`` given: they
  are still counted in the metrics and logged).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import select
import stat
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from service.transport import AssignCallback, Headers, Record, TopicPartition
from streammom.serialization import atomic_write_bytes

__all__ = ["FileSink", "FileSource"]

_log = logging.getLogger("streammom.file")


class FileSource:
    """JSONL lines of ``path`` (``"-"`` = stdin) as partition 0 of topic ``name``."""

    def __init__(self, path: str | os.PathLike[str], *, name: str | None = None) -> None:
        self.path = str(path)
        self.topic = name or ("stdin" if self.path == "-" else f"file:{Path(self.path).name}")
        self.on_assign: AssignCallback | None = None
        self.on_revoke: AssignCallback | None = None
        self._fh: IO[bytes] | None = None
        self._line = 0  # number of lines consumed so far = next offset
        self.exhausted = False
        self._closed = False
        self._stream: bool | None = None  # pipe/terminal: non-blocking line reads
        self._buf = b""
        self._eof = False
        self.paused = False

    @property
    def _tp(self) -> TopicPartition:
        return (self.topic, 0)

    def _open(self) -> IO[bytes]:
        if self._fh is None:
            self._fh = sys.stdin.buffer if self.path == "-" else open(self.path, "rb")  # noqa: SIM115
            if self.on_assign is not None:
                self.on_assign([self._tp])
        return self._fh

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        fh = self._open()
        if self._stream is None:
            self._stream = not _is_regular(fh)
        out: list[Record] = []
        if self.paused:
            return out
        topic = self.topic
        readline = self._read_stream_line if self._stream else (lambda _deadline: fh.readline())
        deadline = time.monotonic() + timeout_s
        while len(out) < max_records:
            line = readline(deadline if not out else None)
            if line is None:  # a pipe with no complete line ready
                break
            if not line:
                self.exhausted = True
                break
            offset = self._line
            self._line += 1
            value = line.rstrip(b"\r\n")
            if value.strip():
                out.append(Record(topic, 0, offset, None, value))
        return out

    def _read_stream_line(self, deadline: float | None) -> bytes | None:
        """One line from a pipe/terminal without blocking past ``deadline`` (None = only what
        is already available); ``b""`` at end of input, None when nothing is ready."""
        fd = self._fh.fileno()  # type: ignore[union-attr]
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[: nl + 1], self._buf[nl + 1 :]
                return line
            if self._eof:
                line, self._buf = self._buf, b""
                return line
            wait = 0.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._eof = True
            self._buf += chunk

    def assignment(self) -> set[TopicPartition]:
        return {self._tp} if self._fh is not None else set()

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Skip forward to the line in ``offsets`` (files are read once: no going back)."""
        target = offsets.get(self._tp)
        if target is None:
            return
        fh = self._open()
        if target < self._line:
            if self._stream:
                raise ValueError(f"cannot seek stdin back to line {target} from {self._line}")
            fh.seek(0)
            self._line = 0
        if self._stream is None:
            self._stream = not _is_regular(fh)
        while self._line < target:
            line = self._read_stream_line(time.monotonic() + 3600) if self._stream else (
                fh.readline())
            if not line:
                self.exhausted = True
                break
            self._line += 1

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Nothing to commit to: the checkpoint holds the line number."""

    def topic_id(self) -> str | None:
        """A file has no topic id (a replaced file is not detected)."""
        return None

    def committed(self) -> dict[TopicPartition, int]:
        """Files have no consumer group: nothing is ever committed."""
        return {}

    def lag(self) -> dict[TopicPartition, int]:
        return {self._tp: 0} if self.exhausted else {}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._fh is not None and self._fh is not sys.stdin.buffer:
            self._fh.close()


class FileSink:
    """Write topics to JSONL files (``"-"`` = stdout) or, for ``replace_topics``, to one file
    replaced atomically per message (the latest model)."""

    def __init__(
        self,
        routes: Mapping[str, str | os.PathLike[str]],
        *,
        envelope_topics: Iterable[str] = (),
        replace_topics: Iterable[str] = (),
    ) -> None:
        self._replace = {t: Path(routes[t]) for t in replace_topics if t in routes}
        self._envelope = set(envelope_topics)
        self._streams: dict[str, IO[bytes]] = {}
        self._fsync: dict[str, bool] = {}
        opened: dict[str, IO[bytes]] = {}
        for topic, target in routes.items():
            if topic in self._replace:
                continue
            key = str(target)
            if key not in opened:
                if key == "-":
                    opened[key] = sys.stdout.buffer
                else:
                    Path(key).parent.mkdir(parents=True, exist_ok=True)
                    opened[key] = open(key, "ab")  # noqa: SIM115 - closed in close()
            self._streams[topic] = opened[key]
            self._fsync[topic] = key != "-" and _is_regular(opened[key])
        self._pending_replace: dict[Path, bytes] = {}
        self._dirty: set[str] = set()
        self.discarded = 0
        self._closed = False

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers = ()
    ) -> None:
        target = self._replace.get(topic)
        if target is not None:
            self._pending_replace[target] = value or b""
            return
        stream = self._streams.get(topic)
        if stream is None:
            self.discarded += 1
            return
        if topic in self._envelope:
            line = json.dumps(
                {
                    "key": key.decode("utf-8", "replace") if key is not None else None,
                    "headers": {k: v.decode("utf-8", "replace") for k, v in headers},
                    "value_b64": base64.b64encode(value or b"").decode("ascii"),
                },
                separators=(",", ":"),
            ).encode()
        else:
            line = value or b""
        stream.write(line + b"\n")
        self._dirty.add(topic)

    def flush(self, timeout: float) -> None:
        done: set[int] = set()
        for topic in sorted(self._dirty):
            stream = self._streams[topic]
            if id(stream) in done:
                continue
            done.add(id(stream))
            stream.flush()
            if self._fsync[topic]:
                os.fsync(stream.fileno())
        self._dirty.clear()
        for path, data in self._pending_replace.items():
            atomic_write_bytes(path, data)
        self._pending_replace.clear()

    def close(self) -> None:
        if self._closed:
            return
        self.flush(0.0)
        self._closed = True
        seen: set[int] = set()
        for stream in self._streams.values():
            if id(stream) in seen or stream is sys.stdout.buffer:
                continue
            seen.add(id(stream))
            stream.close()


def _is_regular(stream: IO[bytes]) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError):
        return False
