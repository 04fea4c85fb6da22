"""The learner role of the scale-out (design §6): the single writer of the model.

Learners form the consumer group ``<kafka.group_id>.learner`` on the one-partition frames
topic; Kafka's assignment of that partition is the election — the learner that holds it is
active, the others stand by. No consensus of our own.

**Take-over** (on gaining the partition, in the loop thread): read the newest valid checkpoint
from the learner-state topic (:class:`~service.state_topic.TopicCheckpointStore`) — sums,
tree, vocabulary, the per-input-partition watermarks and the frames offset, one consistent
set — read the models topic to its end, start a new fencing epoch above every epoch seen on
either topic, number the model above every version published so far, seek the frames
partition to the checkpoint's frames offset (offset 0 when there is no checkpoint) and publish
the restored model under the new epoch.

**Exactly-once learning.** Each frame covers ``[start, end)`` of one input partition; the
watermark of that partition is the ``end`` of the last frame learned, and only events at or
past it are learned (:meth:`~service.frames.Frame.since`). Watermarks and the frames offset
are checkpointed with the sums they belong to, so a replay after a take-over (the frames since
the checkpoint) and frames produced twice by ingest workers are each learned once.

**Fencing.** A learner that loses the partition stops at once (its state is dropped; it
neither publishes nor checkpoints again); models and checkpoints carry the epoch, and ingest
workers (:class:`~service.model_follower.ModelFollower`) and the next take-over ignore those
of older epochs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from service.aligned_blocks import AlignedBlocks
from service.checkpoint import NoValidCheckpointError
from service.config import Settings
from service.events import Rejection
from service.frames import Frame, FrameError, decode_frame
from service.metrics import WorkerMetrics
from service.model_follower import ModelFollower
from service.startup import offset_labels, restored_counters
from service.state_topic import TopicCheckpointStore
from service.transport import Record, Sink, Source, TopicPartition
from service.worker import EXIT_CANNOT_START, BatchResult, Worker, settle_heap
from streammom import StreamingHierarchy

__all__ = ["BAD_FRAME", "FRAMES_PER_BLOCK", "LearnerWorker"]

_log = logging.getLogger("streammom.learner")
#: Dead-letter reason of a frames-topic message that is not a valid frame.
BAD_FRAME = "bad_frame"
#: Frames a poll returns at most, and the offset-aligned blocks of the frames topic the
#: learner processes (a frame holds up to ``worker.batch_max_records`` events).
FRAMES_PER_BLOCK = 16


class LearnerWorker(Worker):
    """Learn the frames topic as the single writer of the model (see the module docstring).

    ``source`` consumes the frames topic in the learners' group; ``state`` keeps the
    checkpoints in the learner-state topic; ``models`` follows the models topic (to fence).
    """

    background_checkpoints = False  # the state topic is written with the loop's producer
    refits_in_helper = False  # its frames are mapped by the vocabulary as they are read

    def __init__(self, settings: Settings, source: Source, sink: Sink, *,
                 state: TopicCheckpointStore, models: ModelFollower,
                 metrics: WorkerMetrics | None = None,
                 engine_factory: Callable[[], StreamingHierarchy] | None = None,
                 exit_when_idle: bool = False,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(settings, source, sink, metrics=metrics, engine_factory=engine_factory,
                         exit_when_idle=exit_when_idle, sleep=sleep)
        self.store = state  # type: ignore[assignment]  # same save/load/directory port
        self.models = models
        self.publisher.per_worker = False  # one model: the bare <model.name> key
        self.frames_partition: TopicPartition = (settings.topics.frames, 0)
        self.blocks = AlignedBlocks(FRAMES_PER_BLOCK)
        self.poll_max_records = FRAMES_PER_BLOCK
        self.active = False
        self._gained = threading.Event()  # set on the IO thread, handled by the loop
        self._misconfigured: str | None = None  # why this learner must not run (IO thread)
        self.metrics.role.info({"role": "learner"})
        self.metrics.learner_active.set(0)

    # ------------------------------------------------------------------ state
    def restore(self) -> None:
        """Start as a standby: kernels compiled, worker id resolved, no state until elected."""
        self._load_kernels()
        self._identify()
        self.restored = True
        settle_heap()

    def _on_assign(self, tps: list[TopicPartition]) -> None:
        with self._lock:
            self.blocks.drop(tps)
            self.blocks.take_resume(())  # the take-over seeks to the checkpoint's frames offset
        others = [tp for tp in tps if tp != self.frames_partition]
        if others:  # two learners would each hold a partition: two writers of one model
            self._misconfigured = (
                f"the frames topic {self.frames_partition[0]} has more than one partition "
                f"(assigned {[f'{t}[{p}]' for t, p in others]}): its single partition is the "
                "learners' election; recreate it with one partition")
        if self.frames_partition in tps:
            self._gained.set()
        _log.info("frames partition assigned" if self.frames_partition in tps
                  else "partitions assigned", extra={"partitions": [f"{t}[{p}]" for t, p in tps]})

    def _on_revoke(self, tps: list[TopicPartition]) -> None:
        with self._lock:
            self.blocks.drop(tps)
        if self.frames_partition in tps and self.active:
            self.active = False  # fenced from now on: no publish, no checkpoint
            self.metrics.learner_active.set(0)
            if self._stop_requested_at is None:
                _log.warning("frames partition revoked: standing by (the next active "
                             "learner resumes from the last checkpoint)")

    def take_over(self) -> None:
        """Become the active learner (see the module docstring)."""
        self._gained.clear()
        self.active = False
        self._engine = None
        ckpt = self.store.load()
        self.models.catch_up()
        if ckpt is not None:
            engine = ckpt.engine()
            offsets = dict(ckpt.offsets)
            counters = restored_counters(ckpt.counters)
        else:
            engine, offsets = self.engine_factory(), {}
            counters = {"processed": 0, "rejected": {}, "assignments": 0}
        epoch = max(self.store.max_epoch, self.models.max_epoch,
                    int(counters.get("model_epoch", 0))) + 1
        self.store.epoch, self.store.seq = epoch, 0
        counters["model_epoch"] = epoch
        engine.raise_version(self.models.max_version + 1)
        frames_offset = offsets.get(self.frames_partition, 0)
        with self._lock:
            self._engine, self.offsets, self.counters = engine, offsets, counters
            self.last_checkpoint_offsets = dict(offsets)
            # frames polled before the seek (a partial block held back) must not be learned
            # ahead of the frames the seek replays: their watermarks would skip those
            self.blocks.drop([self.frames_partition])
        self.source.seek({self.frames_partition: frames_offset})
        self.publisher.published_version = None
        self._last_refit_marker = self._refit_marker()
        self.active = not self._gained.is_set() and self.frames_partition in \
            self.source.assignment()
        if not self.active:  # lost or re-gained meanwhile: the next iteration starts again
            return
        self.metrics.learner_active.set(1)
        self.metrics.model_epoch.set(epoch)
        self.metrics.state_events.set(counters["processed"])
        self.metrics.observe_vocabulary(engine.vocabulary)
        if engine.model_ is not None:
            self.metrics.observe_model(engine)
            self._maybe_publish_model(force=True)
        _log.info("active learner", extra={
            "model_epoch": epoch, "model_version": int(engine.model_version_),
            "frames_offset": frames_offset, "restored": ckpt is not None,
            "processed": counters["processed"], "engine_events": int(engine.n_events_seen_),
            "watermarks": offset_labels({tp: o for tp, o in offsets.items()
                                         if tp != self.frames_partition})})

    def _maybe_take_over(self) -> bool:
        """Take over if the frames partition was gained; False if the state cannot be
        restored (no valid checkpoint) or the frames topic has more than one partition: the
        process then exits 2, like ``run`` when it cannot start safely."""
        if self._misconfigured is not None:
            self.active = False
            self.metrics.learner_active.set(0)
            _log.error("cannot learn: %s", self._misconfigured)
            return False
        if not self._gained.is_set():
            return True
        try:
            self._retrying(self.take_over)
        except NoValidCheckpointError as exc:
            _log.error("cannot take over: the learner state cannot be restored safely",
                       extra={"error": str(exc)})
            return False
        return True

    # ------------------------------------------------------------------ one batch
    def process_batch(self, records: list[Record]) -> bool:
        """Learn the new events of a batch of frames once (watermarks), publish, checkpoint."""
        if self._gained.is_set() or self._misconfigured is not None:
            if not self._maybe_take_over():
                raise SystemExit(EXIT_CANNOT_START)
            return True  # polled before the take-over's seek: read again from the checkpoint
        if not self.active:
            return True  # polled after losing the partition
        t0 = time.perf_counter()
        result = BatchResult(records=len(records))
        for block in self.blocks.split(records):
            rows: list[sp.csr_array] = []
            times: list[np.ndarray] = []
            for rec in block:
                frame = self._frame(rec, result)
                learned = None if frame is None else self._frame_rows(rec, frame, result)
                if learned is not None:
                    rows.append(learned[0])
                    times.append(learned[1])
            if rows:
                self._learn(rows, times, result)
        self.metrics.frames_consumed.inc(len(records))
        return self._finish_batch(records, result, t0)

    def _learn(self, rows: list[sp.csr_array], times: list[np.ndarray],
               result: BatchResult) -> None:
        """Learn a block's new events in engine calls of at most ``batch_max_records`` rows
        (the one-process worker's call size, so refits come at the same pace)."""
        X = sp.vstack(rows, format="csr") if len(rows) > 1 else rows[0]
        ts = np.concatenate(times)
        step = self.settings.worker.batch_max_records
        for a in range(0, X.shape[0], step):
            self.engine.learn(X[a:a + step], timestamps=ts[a:a + step])
            self._note_refit(result)
        self.metrics.observe_vocabulary(self.engine.vocabulary, X)
        self.metrics.observe_refit_schedule(self.engine)
        result.processed += X.shape[0]

    def _frame(self, rec: Record, result: BatchResult) -> Frame | None:
        """The frame of ``rec``, or None after dead-lettering a bad one."""
        try:
            if rec.unreadable is not None:
                raise FrameError(rec.unreadable)
            return decode_frame(rec.value)
        except FrameError as exc:
            self._reject_frame(rec, str(exc), result)
            return None

    def _reject_frame(self, rec: Record, why: str, result: BatchResult) -> None:
        _log.error("invalid frame dead-lettered", extra={"offset": rec.offset, "error": why})
        self._dead_letter(rec, Rejection(BAD_FRAME, why[:512]))
        result.rejected[BAD_FRAME] = result.rejected.get(BAD_FRAME, 0) + 1

    def _frame_rows(self, rec: Record, frame: Frame, result: BatchResult
                    ) -> tuple[sp.csr_array, np.ndarray] | None:
        """The rows and times of the frame's events past the watermark (advancing it), or
        None."""
        source = frame.source
        watermark = self.offsets.get(source)
        if watermark is not None and frame.start > watermark:
            self.metrics.frame_gaps.inc()
            _log.error("frame starts past its input partition's watermark: input records were "
                       "lost before ingest read them", extra={
                           "partition": f"{source[0]}[{source[1]}]", "watermark": watermark,
                           "frame_start": frame.start})
        new = frame if watermark is None else frame.since(watermark)
        skipped = len(frame.offsets) - len(new.offsets)
        if skipped:
            self.metrics.frame_events_skipped.inc(skipped)
            _log.debug("frame events already learned skipped", extra={
                "partition": f"{source[0]}[{source[1]}]", "watermark": watermark,
                "frame_start": frame.start, "frame_end": frame.end, "skipped": skipped,
                "offset": rec.offset})
        if watermark is not None and frame.end <= watermark:
            return None
        try:
            X = self.engine.vocabulary.transform(new.features, binary=self._binary)
        except (TypeError, ValueError) as exc:
            self._reject_frame(rec, f"frame features: {exc}", result)
            return None
        with self._lock:
            self.offsets[source] = frame.end
        return X, new.ts

    def _advance(self, records: list[Record], result: BatchResult) -> None:
        """The frames offset (next frame to read) and the counters of the batch."""
        if records:
            with self._lock:
                self.offsets[self.frames_partition] = records[-1].offset + 1
        self._count(result)
        self.metrics.state_events.set(self.counters["processed"])
        self.checkpoints.add_records(result.processed)

    # ------------------------------------------------------------------ loop hooks
    def _idle(self) -> bool:
        if not self._maybe_take_over():
            raise SystemExit(EXIT_CANNOT_START)
        if not self.active:
            self._update_lag(force=True)
            return True
        return super()._idle()

    def _maybe_publish_model(self, *, force: bool = False) -> None:
        if self.active and self._engine is not None and self._engine.model_ is not None:
            super()._maybe_publish_model(force=force)

    def checkpoint(self) -> bool:
        if not self.active:
            return False
        return super().checkpoint()

    def _checkpoint_due_at_shutdown(self) -> bool:
        return self.checkpoints.pending or self.store.seq == 0

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready when restored and the broker answers; an active learner also needs its last
        checkpoint write to have succeeded. A standby is ready (it is healthy, waiting)."""
        broker, checkpoint = self.broker.ok, self.checkpoints.ok
        ok = self.restored and broker and (checkpoint or not self.active)
        self.metrics.ready.set(1 if ok else 0)
        return ok, {"role": "learner", "active": self.active, "restored": self.restored,
                    "broker": broker, "checkpoint": checkpoint}

    def _close(self) -> None:
        super()._close()
        self.models.reader.close()

    def shutdown(self) -> int:
        """An active learner publishes and checkpoints before closing; a standby just closes."""
        if self.active:
            return super().shutdown()
        self._close()
        _log.info("stopped (standby)")
        return 0
