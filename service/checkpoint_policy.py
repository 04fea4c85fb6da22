"""When the worker writes a checkpoint, how, and what happens when the write fails.

One object holds what the loop needs (as Quix Streams' ``Checkpoint`` does): the records since
the last checkpoint, its time, a pending request (a partition revocation) and the retry
schedule after a failed write. The worker asks :meth:`CheckpointPolicy.due` and either

* calls :meth:`CheckpointPolicy.commit`, which writes the state with its offsets and only then
  commits those offsets to the source (design §6: Kafka commits follow checkpoints) — at
  shutdown, on a partition revocation, and for stores written on the loop; or
* calls :meth:`CheckpointPolicy.begin`, which takes a consistent copy of the state on the loop
  (the manifest serialised, the arrays copied: tens of milliseconds) and hands the encoding
  and the durable write to one background thread, then :meth:`CheckpointPolicy.finish` on
  later iterations, which commits the offsets *of that copy* once the write is durable. The
  loop never waits for the disk; at most one write is in flight; a later synchronous
  checkpoint waits for it first, so two writes never race on the same files.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from service.checkpoint import CheckpointStore, freeze_checkpoint
from service.metrics import WorkerMetrics
from service.startup import offset_labels
from service.transport import TopicPartition, TransportError
from streammom import StreamingHierarchy

__all__ = ["CheckpointPolicy"]

_log = logging.getLogger("streammom.worker")


@dataclass
class _Write:
    """A checkpoint being written by the background thread."""

    future: Future[int]  # bytes written
    offsets: dict[TopicPartition, int]  # the offsets the copied state covers
    records: int  # records_since when the copy was taken
    requested: bool  # a request the copy answers (made again if the write fails)
    taken_at: float  # monotonic time of the copy


class CheckpointPolicy:
    """Checkpoint every ``every_events`` records or ``every_seconds`` (with at least one new
    record), or on request; after a failed write wait ``backoff_initial_s``, doubling per
    consecutive failure up to ``every_seconds``, before the next attempt.

    >>> policy = CheckpointPolicy(every_events=100, every_seconds=60.0, backoff_initial_s=1.0)
    >>> policy.add_records(99); policy.due()
    False
    >>> policy.add_records(1); policy.due()
    True
    >>> policy.failed()  # seconds until the retry
    1.0
    >>> policy.due(), policy.ok
    (False, False)
    >>> policy.written(); policy.due(), policy.ok
    (False, True)
    """

    def __init__(self, *, every_events: int, every_seconds: float,
                 backoff_initial_s: float) -> None:
        self.every_events = every_events
        self.every_seconds = every_seconds
        self.backoff_initial_s = backoff_initial_s
        self.records_since = 0  # input records (valid or not) since the last checkpoint
        self.last_written = time.monotonic()
        self.requested = False
        self.urgent = False  # the request must be written on the loop (a revocation)
        self.ok = True  # False from a failed write until one succeeds (readiness)
        self.failures = 0  # consecutive failed writes
        self.retry_at = 0.0  # monotonic time before which no retry is attempted
        self._write: _Write | None = None  # the background write in flight
        self._writer: ThreadPoolExecutor | None = None
        self._directory = ""  # where the background write goes (for its error log)
        #: The offsets of the last good checkpoint (the restored one at start; logged when a
        #: write fails).
        self.last_offsets: dict[TopicPartition, int] = {}

    def add_records(self, n: int) -> None:
        """``n`` more input records are covered by the in-memory state."""
        self.records_since += n

    def request(self, *, urgent: bool = True) -> None:
        """Checkpoint at the next opportunity: ``urgent`` (partitions are being revoked) on the
        loop, before it goes on; else (a new model) possibly in the background."""
        self.requested = True
        self.urgent = self.urgent or urgent

    @property
    def pending(self) -> bool:
        """True when the state holds records no checkpoint covers."""
        return self.records_since > 0

    def due(self) -> bool:
        """True when a checkpoint should be written now (and no failed write's backoff runs)."""
        now = time.monotonic()
        wanted = (
            self.requested
            or self.records_since >= self.every_events
            or (self.pending and now - self.last_written >= self.every_seconds)
        )
        return wanted and now >= self.retry_at and self._write is None

    @property
    def in_flight(self) -> bool:
        """A background write has started and its outcome is not yet handled."""
        return self._write is not None

    def written(self, *, records: int | None = None, taken_at: float | None = None) -> None:
        """A checkpoint was written: start counting again and clear any failure. A background
        write covers the ``records`` counted when its copy was ``taken_at``; later ones stay."""
        self.records_since = 0 if records is None else max(0, self.records_since - records)
        self.last_written = time.monotonic() if taken_at is None else taken_at
        if records is None:
            self.requested = self.urgent = False
        self.ok = True
        self.failures = 0
        self.retry_at = 0.0

    def failed(self) -> float:
        """A write failed: schedule the retry; returns the delay in seconds."""
        self.failures += 1
        self.ok = False
        delay = min(self.backoff_initial_s * 2 ** (self.failures - 1), self.every_seconds)
        self.retry_at = time.monotonic() + delay
        return delay

    def commit(
        self,
        store: CheckpointStore,
        engine: StreamingHierarchy,
        offsets: Mapping[TopicPartition, int],
        counters: Mapping[str, Any],
        *,
        commit_offsets: Callable[[dict[TopicPartition, int]], None],
        metrics: WorkerMetrics,
    ) -> bool:
        """Write the checkpoint (state + ``offsets``) atomically, then commit ``offsets``;
        False if the write failed. A background write still in flight is finished first.

        A write error (:class:`OSError`: ``ENOSPC``, ``EACCES``, ``EIO`` …) does not stop the
        loop: nothing is committed, ``streammom_checkpoint_failures_total`` is incremented,
        ``streammom_last_checkpoint_timestamp_seconds`` stays at the last good one, readiness
        turns false (:attr:`ok`) and the error is logged (with :attr:`last_offsets`, the ones
        the last good checkpoint covers). The retry waits ``backoff_initial_s``, doubling per
        consecutive failure up to ``every_seconds``; the first success commits and restores
        readiness. A failed commit is only logged: the checkpoint is the truth, and the next
        one commits again.
        """
        self.finish(wait=True, commit_offsets=commit_offsets, metrics=metrics)
        self._directory = str(store.directory)
        taken_at = time.monotonic()
        try:
            size = store.save(freeze_checkpoint(engine, dict(offsets), dict(counters)))
        except OSError as exc:
            self._failed_write(exc, metrics)
            return False
        self._recovered()
        self.written()
        self._succeeded(dict(offsets), size, taken_at, commit_offsets, metrics)
        return True

    def begin(
        self,
        store: CheckpointStore,
        engine: StreamingHierarchy,
        offsets: Mapping[TopicPartition, int],
        counters: Mapping[str, Any],
    ) -> None:
        """Start a background checkpoint: copy the state now (:func:`freeze_checkpoint`), encode
        it into the file on the writer thread; :meth:`finish` handles the outcome. Only when
        no write is in flight (:meth:`due` says so)."""
        assert self._write is None, "one background checkpoint at a time"
        taken_at = time.monotonic()
        frozen = freeze_checkpoint(engine, dict(offsets), dict(counters))
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="streammom-checkpoint")
        self._write = _Write(self._writer.submit(store.save, frozen), dict(offsets),
                             self.records_since, self.requested, taken_at)
        self.requested = False
        self._directory = str(store.directory)

    def finish(
        self,
        *,
        wait: bool,
        commit_offsets: Callable[[dict[TopicPartition, int]], None],
        metrics: WorkerMetrics,
    ) -> bool | None:
        """Handle the outcome of the background write, if it ended (or ``wait``): on success
        the offsets of its copy are committed (the state they belong to is durable); on an
        :class:`OSError` the failure path of :meth:`commit`. None when no write ended."""
        job = self._write
        if job is None or not (wait or job.future.done()):
            return None
        self._write = None
        try:
            size = job.future.result()
        except OSError as exc:
            self.requested = self.requested or job.requested
            self._failed_write(exc, metrics)
            return False
        self._recovered()
        self.written(records=job.records, taken_at=job.taken_at)
        self._succeeded(job.offsets, size, job.taken_at, commit_offsets, metrics)
        return True

    def close(self) -> None:
        """Stop the writer thread (after :meth:`finish` with ``wait``)."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    def _recovered(self) -> None:
        if not self.ok:
            _log.info("checkpoint written again; committing",
                      extra={"failed_attempts": self.failures})

    def _failed_write(self, exc: OSError, metrics: WorkerMetrics) -> None:
        delay = self.failed()
        metrics.checkpoint_failures.inc()
        metrics.ready.set(0)
        _log.error(
            "checkpoint write failed; not committing, still processing (the events since "
            "the last checkpoint are replayed after a crash); retrying with backoff",
            extra={"dir": self._directory, "error": str(exc),
                   "errno": errno.errorcode.get(exc.errno or 0, exc.errno),
                   "failures": self.failures, "retry_in_s": round(delay, 3),
                   "last_checkpoint_offsets": offset_labels(self.last_offsets)})

    def _succeeded(self, offsets: dict[TopicPartition, int], size: int, taken_at: float,
                   commit_offsets: Callable[[dict[TopicPartition, int]], None],
                   metrics: WorkerMetrics) -> None:
        self.last_offsets = offsets
        metrics.last_checkpoint.set(time.time())
        _log.debug("checkpoint written", extra={"bytes": size,
                                                "seconds": round(time.monotonic() - taken_at, 4)})
        if offsets:
            try:
                commit_offsets(dict(offsets))
            except TransportError as exc:
                # Not a readiness signal: a commit sent during an outage fails afterwards.
                _log.warning("commit failed; will commit with the next checkpoint",
                             extra={"error": repr(exc)})

