"""The learner's checkpoints in a compacted Kafka topic, so a standby learner can take over.

The learner of the scale-out (design §6) runs as a StatefulSet of two pods with their own
disks; the one that takes over must start from the state the dead one last checkpointed. The
checkpoint (:func:`service.checkpoint.encode_checkpoint`: sums, tree, vocabulary, the input
watermarks and the frames offset) therefore goes to the single-partition, compacted topic
``topics.learner_state``:

* the archive is cut into chunks of at most ``chunk_bytes``, keys
  ``<name>/chunk/<epoch>/<seq>/<i>``;
* then a manifest, key ``<name>/manifest/<epoch>``, JSON ``{"epoch", "seq", "chunks",
  "bytes", "sha256"}`` — written only after every chunk was acknowledged, so a learner killed
  mid-write leaves the previous manifest in force;
* then tombstones for the chunks the new manifest replaced, so compaction keeps one
  checkpoint (plus the manifest of each epoch).

:meth:`TopicCheckpointStore.load` reads the topic to its end and tries the manifests from the
largest ``(epoch, seq)`` down: the first whose chunks are all present and hash to its sha256
and that decodes into an engine is the checkpoint. A manifest of an older learner generation
(a zombie still writing after it was replaced) loses to the newer epoch's.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any

from service.checkpoint import Checkpoint, NoValidCheckpointError, decode_checkpoint
from service.transport import Sink, TopicReader, TransportError
from streammom.serialization import FrozenArchive

__all__ = ["StateTopicError", "TopicCheckpointStore"]

_log = logging.getLogger("streammom.learner")


class StateTopicError(OSError):
    """A checkpoint could not be written to the state topic (the broker did not acknowledge
    it): handled like a failed disk write — not committed, retried with backoff."""


class TopicCheckpointStore:
    """Checkpoints of model ``name`` in ``topic`` (see the module docstring).

    ``epoch`` is the learner generation that writes (set at take-over); ``seq`` counts the
    checkpoints of that generation.
    """

    def __init__(self, sink: Sink, reader_factory: Callable[[], TopicReader], topic: str, *,
                 name: str, chunk_bytes: int, flush_timeout_s: float = 30.0) -> None:
        self.sink = sink
        self.reader_factory = reader_factory
        self.topic = topic
        self.name = name
        self.chunk_bytes = max(1024, int(chunk_bytes))
        self.flush_timeout_s = flush_timeout_s
        self.epoch = 0
        self.seq = 0
        self.max_epoch = -1  # the largest epoch of any manifest read by load()
        self._live_chunks: list[bytes] = []  # chunk keys to tombstone after the next save
        self._stale_manifests: list[bytes] = []  # manifests of earlier generations

    @property
    def directory(self) -> str:
        """Where the checkpoints are (for logs, like :attr:`CheckpointStore.directory`)."""
        return f"topic {self.topic}"

    def _prefix(self, kind: str) -> str:
        return f"{self.name}/{kind}/"

    def save(self, data: bytes | FrozenArchive) -> int:
        """Write ``data`` (bytes, or a frozen checkpoint, encoded here: its chunks and digest
        need the bytes) as the checkpoint of ``(epoch, seq + 1)``; the bytes written.
        :class:`StateTopicError` if the broker did not acknowledge it within
        ``flush_timeout_s``."""
        if isinstance(data, FrozenArchive):
            data = data.to_bytes()
        seq = self.seq + 1
        base = f"{self._prefix('chunk')}{self.epoch}/{seq}/"
        n = max(1, -(-len(data) // self.chunk_bytes))
        keys = [f"{base}{i}".encode() for i in range(n)]
        try:
            for i, key in enumerate(keys):
                self.sink.produce(self.topic, key,
                                  data[i * self.chunk_bytes:(i + 1) * self.chunk_bytes])
            self.sink.flush(self.flush_timeout_s)
            manifest = {"epoch": self.epoch, "seq": seq, "chunks": n, "bytes": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()}
            self.sink.produce(self.topic, f"{self._prefix('manifest')}{self.epoch}".encode(),
                              json.dumps(manifest, sort_keys=True).encode())
            self.sink.flush(self.flush_timeout_s)
        except TransportError as exc:
            raise StateTopicError(f"checkpoint not acknowledged by {self.topic}: {exc}") from exc
        for key in self._live_chunks + self._stale_manifests:  # compaction drops them
            self.sink.produce(self.topic, key, None)
        self.seq, self._live_chunks, self._stale_manifests = seq, keys, []
        return len(data)

    def _read_all(self) -> dict[bytes, bytes]:
        """Every key's latest value (tombstones remove), reading the topic to its end."""
        reader = self.reader_factory()
        latest: dict[bytes, bytes] = {}
        try:
            while True:
                for rec in reader.read(0.5):
                    if rec.key is None:
                        continue
                    if rec.value is None:
                        latest.pop(rec.key, None)
                    else:
                        latest[rec.key] = rec.value
                if reader.caught_up():  # every record up to the end has been returned
                    return latest
        finally:
            reader.close()

    def _manifests(self, latest: dict[bytes, bytes]) -> list[dict[str, Any]]:
        prefix = self._prefix("manifest").encode()
        out = []
        for key, value in latest.items():
            if not key.startswith(prefix):
                continue
            try:
                m = json.loads(value)
                ok = (isinstance(m, dict) and all(isinstance(m.get(f), int) and not
                                                  isinstance(m.get(f), bool)
                                                  for f in ("epoch", "seq", "chunks", "bytes"))
                      and isinstance(m.get("sha256"), str))
            except (UnicodeDecodeError, json.JSONDecodeError):
                ok = False
            if not ok:
                _log.error("invalid learner-state manifest; ignoring it",
                           extra={"key": key.decode(errors="replace")})
                continue
            m["key"] = key
            out.append(m)
        return sorted(out, key=lambda m: (m["epoch"], m["seq"]), reverse=True)

    def load(self) -> Checkpoint | None:
        """The newest valid checkpoint on the topic — its engine already rebuilt — or None.

        Raises :class:`~service.checkpoint.NoValidCheckpointError` if manifests exist but
        none leads to a valid checkpoint (starting from scratch would re-learn the input).
        """
        latest = self._read_all()
        manifests = self._manifests(latest)
        self.max_epoch = max((m["epoch"] for m in manifests), default=-1)
        errors = []
        for m in manifests:
            base = f"{self._prefix('chunk')}{m['epoch']}/{m['seq']}/"
            keys = [f"{base}{i}".encode() for i in range(m["chunks"])]
            parts = [latest.get(k) for k in keys]
            try:
                if any(p is None for p in parts):
                    raise ValueError("chunks missing")
                data = b"".join(p for p in parts if p is not None)
                if len(data) != m["bytes"] or hashlib.sha256(data).hexdigest() != m["sha256"]:
                    raise ValueError("chunks do not match the manifest's size and sha256")
                ckpt = decode_checkpoint(data)
                ckpt._rebuilt = ckpt.engine()
            except Exception as exc:  # any failure to read or rebuild means "invalid"
                _log.error("invalid learner checkpoint; trying an older one",
                           extra={"epoch": m["epoch"], "seq": m["seq"], "error": repr(exc)})
                errors.append(f"epoch {m['epoch']} seq {m['seq']}: {exc}")
                continue
            # after this generation's first checkpoint, compaction may drop everything read here
            chunk_prefix = self._prefix("chunk").encode()
            self._live_chunks = [k for k in latest if k.startswith(chunk_prefix)]
            self._stale_manifests = [o["key"] for o in manifests]
            return ckpt
        if errors:
            raise NoValidCheckpointError(
                f"no valid learner checkpoint in {self.topic}: " + "; ".join(errors))
        return None
