"""The ingest role of the scale-out (design §6): stateless, any number, one consumer group.

Per batch of input records::

    decode/validate (bad → dead letter, as the one-process worker)
      → route with the newest published model (ModelFollower; the root leaf, version 0,
        before the learner published one) → one assignment per valid event
      → one frame per input partition (its valid events, offsets and the range covered)
        to the frames topic → flush → commit the input offsets

An ingest worker keeps no state: its position is the group's committed offset, committed only
after the batch's assignments, dead letters and frames were acknowledged (every
``checkpoint.every_events`` records / ``every_seconds``, on a revocation and at shutdown). A
worker that dies between producing and committing makes its successor produce those frames
again; the learner learns each input offset once (its watermarks, :mod:`service.learner`).
Assignments of such a replay are produced again (at-least-once outputs, as the one-process
worker after a restart).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from service.config import Settings
from service.frames import FRAME_CONTENT_TYPE, encode_frame
from service.metrics import WorkerMetrics
from service.model_follower import ModelFollower
from service.transport import Record, Sink, Source, TopicPartition, TransportError
from service.worker import BatchResult, Worker, settle_heap

__all__ = ["IngestWorker"]

_log = logging.getLogger("streammom.ingest")


class IngestWorker(Worker):
    """Decode, dead-letter, assign and forward frames (see the module docstring)."""

    background_checkpoints = False  # its checkpoint is a commit of what was acknowledged
    refits_in_helper = False  # it keeps no engine

    def __init__(self, settings: Settings, source: Source, sink: Sink, *,
                 models: ModelFollower, metrics: WorkerMetrics | None = None,
                 exit_when_idle: bool = False,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(settings, source, sink, metrics=metrics,
                         exit_when_idle=exit_when_idle, sleep=sleep)
        self.models = models
        self.frames_topic = settings.topics.frames
        self.metrics.role.info({"role": "ingest"})

    # ------------------------------------------------------------------ state
    def restore(self) -> None:
        """No state to restore: compile the routing kernels and read the models topic."""
        self._load_kernels()
        self._identify()
        self._retrying(self.models.catch_up)
        self._observe_model()
        self.restored = True
        settle_heap()

    def _on_assign(self, tps: list[TopicPartition]) -> None:
        """Resume from the group's committed offsets (no state: nothing of its own to seek),
        or, for a partition kept through the rebalance, from the first record it dropped
        (:meth:`Worker._on_assign`): frames must tile the input log without holes."""
        with self._lock:
            for tp in tps:
                self.offsets.pop(tp, None)
        super()._on_assign(tps)

    def _on_revoke(self, tps: list[TopicPartition]) -> None:
        super()._on_revoke(tps)
        with self._lock:
            for tp in tps:
                self.offsets.pop(tp, None)

    def _follow_models(self) -> None:
        """Switch to a newer published model if one arrived (an outage only delays it)."""
        try:
            changed = self.models.update(0.0)
        except TransportError as exc:
            _log.debug("models topic not readable now", extra={"error": str(exc)})
            return
        if changed:
            self._observe_model()

    def _observe_model(self) -> None:
        epoch, version = self.models.current
        self.metrics.model_epoch.set(max(epoch, 0))
        self.metrics.model_version.set(max(version, 0))

    # ------------------------------------------------------------------ one batch
    def process_batch(self, records: list[Record]) -> bool:
        t0 = time.perf_counter()
        self._follow_models()
        result = BatchResult(records=len(records))
        frames: dict[TopicPartition, tuple[list[int], list[float], list[Any]]] = {}
        for block in self.blocks.split(records):
            valid = self._valid_events(block, result)
            for rec, event in valid:
                offsets, ts, features = frames.setdefault((rec.topic, rec.partition),
                                                          ([], [], []))
                offsets.append(rec.offset)
                ts.append(event.ts)
                features.append(event.features())
            if valid:
                events = [event for _, event in valid]
                self._produce_assignments(
                    events, self.models.assign(events, binary=self._binary), result)
        self._produce_frames(records, frames)
        return self._finish_batch(records, result, t0)

    def _produce_frames(self, records: list[Record],
                        frames: dict[TopicPartition, tuple[list[int], list[float], list[Any]]]
                        ) -> None:
        """One frame per input partition of the batch, covering every record read from it
        (dead-lettered ones too, so a partition's frames tile its log)."""
        ranges: dict[TopicPartition, list[int]] = {}
        for rec in records:
            span = ranges.setdefault((rec.topic, rec.partition), [rec.offset, rec.offset + 1])
            span[1] = rec.offset + 1
        produced = 0
        for (topic, partition), (start, end) in sorted(ranges.items()):
            offsets, ts, features = frames.get((topic, partition), ([], [], []))
            for value in self._frame_values(topic, partition, start, end, offsets, ts,
                                            features):
                self.sink.produce(self.frames_topic, f"{topic}/{partition}".encode(), value,
                                  [("content-type", FRAME_CONTENT_TYPE)])
                produced += 1
        self.metrics.frames_produced.inc(produced)

    def _frame_values(self, topic: str, partition: int, start: int, end: int,
                      offsets: list[int], ts: list[float], features: list[Any]) -> list[bytes]:
        """The frame of ``[start, end)``, cut in two at an event's offset (recursively, in
        order) while it is larger than a produced message may be: large documents never make
        a frame the broker refuses, and the pieces still tile the range."""
        value = encode_frame(topic, partition, start, end, offsets, ts, features)
        if len(value) <= self._max_message_bytes or len(offsets) < 2:
            return [value]
        mid = len(offsets) // 2
        cut = offsets[mid]
        return (self._frame_values(topic, partition, start, cut, offsets[:mid], ts[:mid],
                                   features[:mid])
                + self._frame_values(topic, partition, cut, end, offsets[mid:], ts[mid:],
                                     features[mid:]))

    # ------------------------------------------------------------------ loop hooks
    def checkpoint(self) -> bool:
        """No state: commit the input offsets whose outputs were acknowledged."""
        with self._lock:
            offsets = dict(self.offsets)
        if offsets:
            try:
                self.source.commit(offsets)
            except Exception as exc:  # advisory: the next commit carries them again
                _log.warning("commit failed; will commit again", extra={"error": repr(exc)})
        self.checkpoints.written()
        self.metrics.last_checkpoint.set(time.time())  # the position is durable up to here
        self.last_checkpoint_offsets = offsets
        return True

    def _checkpoint_due_at_shutdown(self) -> bool:
        return True  # commit what was acknowledged

    def _idle(self) -> bool:
        self._follow_models()
        self._maybe_checkpoint()
        self._update_lag(force=True)
        return True

    def _maybe_publish_model(self, *, force: bool = False) -> None:
        return None  # the learner publishes the model

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready when partitions are assigned and the broker answers (a model is not needed:
        before the learner publishes one, events go to the root leaf)."""
        assigned = bool(self.source.assignment())
        broker = self.broker.ok
        ok = assigned and self.restored and broker
        self.metrics.ready.set(1 if ok else 0)
        return ok, {"role": "ingest", "assigned": assigned, "restored": self.restored,
                    "broker": broker, "model": list(self.models.current)}

    def _close(self) -> None:
        super()._close()
        self.models.reader.close()

    def shutdown(self) -> int:
        """Flush, commit and close (no state to write)."""
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        if not self._flush():
            return self._abort()
        self.checkpoint()
        self._close()
        _log.info("stopped", extra={"processed": self.counters["processed"]})
        return 0
