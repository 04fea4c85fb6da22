"""When the worker writes a checkpoint, how, and what happens when the write fails.

One object holds what the loop needs (as Quix Streams' ``Checkpoint`` does): the records since
the last checkpoint, its time, a pending request (a partition revocation) and the retry
schedule after a failed write. The worker asks :meth:`CheckpointPolicy.due` and calls
:meth:`CheckpointPolicy.commit`, which writes the state with its offsets and only then commits
those offsets to the source (design §6: Kafka commits follow checkpoints).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from service.checkpoint import CheckpointStore, encode_checkpoint
from service.metrics import WorkerMetrics
from service.startup import offset_labels
from service.transport import TopicPartition, TransportError
from streammom import StreamingHierarchy

__all__ = ["CheckpointPolicy"]

_log = logging.getLogger("streammom.worker")


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
        self.ok = True  # False from a failed write until one succeeds (readiness)
        self.failures = 0  # consecutive failed writes
        self.retry_at = 0.0  # monotonic time before which no retry is attempted

    def add_records(self, n: int) -> None:
        """``n`` more input records are covered by the in-memory state."""
        self.records_since += n

    def request(self) -> None:
        """Checkpoint at the next opportunity (partitions are being revoked)."""
        self.requested = True

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
        return wanted and now >= self.retry_at

    def written(self) -> None:
        """A checkpoint was written: start counting again and clear any failure."""
        self.records_since = 0
        self.last_written = time.monotonic()
        self.requested = False
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
        last_offsets: Mapping[TopicPartition, int],
    ) -> bool:
        """Write the checkpoint (state + ``offsets``) atomically, then commit ``offsets``;
        False if the write failed.

        A write error (:class:`OSError`: ``ENOSPC``, ``EACCES``, ``EIO`` …) does not stop the
        loop: nothing is committed, ``streammom_checkpoint_failures_total`` is incremented,
        ``streammom_last_checkpoint_timestamp_seconds`` stays at the last good one, readiness
        turns false (:attr:`ok`) and the error is logged (with ``last_offsets``, the ones the
        last good checkpoint covers). The retry waits ``backoff_initial_s``, doubling per
        consecutive failure up to ``every_seconds``; the first success commits and restores
        readiness. A failed commit is only logged: the checkpoint is the truth, and the next
        one commits again.
        """
        t0 = time.perf_counter()
        data = encode_checkpoint(engine, dict(offsets), dict(counters))
        try:
            store.save(data)
        except OSError as exc:
            delay = self.failed()
            metrics.checkpoint_failures.inc()
            metrics.ready.set(0)
            _log.error(
                "checkpoint write failed; not committing, still processing (the events since "
                "the last checkpoint are replayed after a crash); retrying with backoff",
                extra={"dir": str(store.directory), "error": str(exc),
                       "errno": errno.errorcode.get(exc.errno or 0, exc.errno),
                       "failures": self.failures, "retry_in_s": round(delay, 3),
                       "last_checkpoint_offsets": offset_labels(last_offsets)})
            return False
        if not self.ok:
            _log.info("checkpoint written again; committing",
                      extra={"failed_attempts": self.failures})
        self.written()
        metrics.last_checkpoint.set(time.time())
        _log.debug("checkpoint written", extra={"bytes": len(data),
                                                "seconds": round(time.perf_counter() - t0, 4)})
        if offsets:
            try:
                commit_offsets(dict(offsets))
            except TransportError as exc:
                # Not a readiness signal: a commit sent during an outage fails afterwards.
                _log.warning("commit failed; will commit with the next checkpoint",
                             extra={"error": repr(exc)})
        return True
