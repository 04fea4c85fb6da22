"""The daemon loop: a thin, transport-agnostic loop around :class:`streammom.StreamingHierarchy`.

Per batch (bounded ``max_records``, poll timeout ≤ 1 s)::

    poll → decode/validate (bad → DLQ with the original bytes + dlq.* headers,
                             :mod:`service.dead_letters`)
         → vocabulary.transform → engine.learn  (ONE vectorised engine call per offset-aligned
           block, :mod:`service.aligned_blocks`; the data path is :mod:`service.pipeline`)
         → produce one assignment per valid event (+ the model when its version changed or
           every ``model_publish_interval_s``)
         → flush (retried with backoff until the broker acknowledged everything)
         → advance the in-memory offsets → checkpoint if due → commit the checkpointed offsets

Delivery semantics (exactly-once state, at-least-once outputs, commits after checkpoints,
retries, shutdown) are specified in ``docs/design.md`` §6 with the code implementing each.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from threadpoolctl import threadpool_limits

from service.aligned_blocks import AlignedBlocks
from service.broker_status import BrokerStatus
from service.checkpoint import CheckpointStore, NoValidCheckpointError
from service.checkpoint_policy import CheckpointPolicy
from service.config import Settings, build_engine
from service.dead_letters import dead_letter
from service.events import UNREADABLE, Event, EventDecoder, Rejection
from service.key_partitioner import murmur2
from service.metrics import WorkerMetrics
from service.model_publisher import ModelPublisher
from service.pipeline import assignment_values, event_features, event_timestamps
from service.startup import (
    StateLostError,
    lost_state_start,
    offset_labels,
    resolve_worker_id,
    restored_counters,
)
from service.transport import Record, Sink, Source, TopicPartition, TransportError
from streammom import StreamingHierarchy, __version__, warm_up
from streammom.background_refits import BackgroundRefits
from streammom.model import Routing
from streammom.refit_process import RefitProcess
from streammom.report import CodeMap, from_engine, resolve_codes, write_report

__all__ = ["EXIT_CANNOT_START", "BatchResult", "StateLostError", "Worker"]

_log = logging.getLogger("streammom.worker")
#: Exit status when the state cannot be restored safely (no valid checkpoint, or a lost state
#: under ``on_lost_state=refuse``): restarting will not help, the operator must act.
EXIT_CANNOT_START = 2
MESSAGE_OVERHEAD_BYTES = 4096  # record + batch headers, key, message headers

#: Records polled while the input is paused (backpressure) stay pending, unprocessed, up to
#: this many aligned blocks (:meth:`Worker.take_ready`): more than a batch can be (fewer than
#: two blocks pending, plus one poll).
HOLD_BLOCKS = 3

#: While the input is paused (backpressure), the loop waits at most this long for the helper's
#: refit between two polls, so it keeps polling, beating and exporting the lag.
PAUSED_WAIT_S = 0.05


@dataclass
class BatchResult:
    """What one batch did (for tests and logs)."""

    records: int = 0
    processed: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    model_version: int = 0
    refitted: bool = False
    checkpointed: bool = False


def refit_labels(setting: str, *, replay: bool) -> Literal["current", "after_refit"]:
    """``worker.refit_labels`` resolved: ``auto`` is ``after_refit`` for a replay of input that
    ends (embedded mode, the demo: the same input gives the same outputs) and ``current`` for
    a live stream (the loop never waits for a refit).

    >>> refit_labels("auto", replay=True), refit_labels("auto", replay=False)
    ('after_refit', 'current')
    >>> refit_labels("current", replay=True)
    'current'
    """
    if setting == "auto":
        return "after_refit" if replay else "current"
    return setting  # type: ignore[return-value]  # validated by the settings (and the refits)


#: The cyclic collector's thresholds in the daemon (:func:`gc.set_threshold`; CPython's own
#: are 700, 10, 10). A batch keeps tens of thousands of container objects alive for its
#: lifetime (records, validated events, the producer's futures, held batches while a refit
#: runs), so at 700 allocations a youngest-generation collection finds them alive, promotes
#: them, and the older generations' collections rescan them again and again: on the 200,000-event
#: encounter stream of ``bench/daemon_defaults.py`` 3,500 + 320 + 30 collections took 1.9 s of the
#: daemon's 17.7 s (the 30 full ones 1.0 s). At 50,000 a batch's objects are mostly freed by
#: reference counting before a collection sees them: 107 collections, 0.1 s (BENCHMARKS.md
#: "The collector's thresholds"). Cyclic garbage still goes, a few batches later.
GC_THRESHOLDS = (50_000, 20, 100)


def settle_heap() -> None:
    """Move everything alive after start-up (modules, schemas, compiled kernels, the restored
    state) out of the cyclic collector's generations (:func:`gc.freeze`), so its collections
    scan only what the loop allocates per batch, not the whole start-up heap again and again,
    and set the collector's thresholds for batch-sized lifetimes (:data:`GC_THRESHOLDS`).
    Frozen objects are still freed by reference counting; only cycles among them would stay."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class Worker:
    """Consume ``source``, learn with the engine, produce to ``sink``; checkpoint and commit.

    ``engine_factory`` builds a fresh engine when there is no checkpoint (default:
    :func:`service.config.build_engine` from ``settings.model``). ``exit_when_idle`` stops the
    loop when a poll returns nothing and the source is exhausted (embedded/file mode, tests).
    """

    def __init__(
        self,
        settings: Settings,
        source: Source,
        sink: Sink,
        *,
        metrics: WorkerMetrics | None = None,
        engine_factory: Callable[[], StreamingHierarchy] | None = None,
        checkpoint_dir: Any = None,
        exit_when_idle: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.source = source
        self.sink = sink
        self.metrics = metrics or WorkerMetrics()
        if hasattr(sink, "on_drop"):  # a sink that can give up on a message reports it
            sink.on_drop = lambda topic: self.metrics.messages_dropped.labels(topic=topic).inc()
        self.engine_factory = engine_factory or (lambda: build_engine(settings.model))
        self.store = CheckpointStore(checkpoint_dir or settings.checkpoint.dir)
        self.worker_id_dir = self.store.directory  # where an id of its own is kept
        self.exit_when_idle = exit_when_idle
        self._sleep = sleep
        self.decoder = EventDecoder(settings.limits)
        self.topics = settings.topics
        self._engine: StreamingHierarchy | None = None
        self._refits: BackgroundRefits | None = None  # role all: refits in a helper process
        self._refit_process: RefitProcess | None = None
        if self.refits_in_helper and settings.worker.refit_process:
            w = settings.worker  # started now: it imports the library while this one starts up
            self._refit_process = RefitProcess(blas_threads=w.blas_threads,
                                               timeout_s=w.refit_timeout_s, nice=w.refit_nice)
            self._refit_process.start()
        self._batch: BatchResult | None = None  # the batch being processed
        self._paused_since: float | None = None  # input paused for backpressure since
        self.offsets: dict[TopicPartition, int] = {}
        self.counters: dict[str, Any] = {"processed": 0, "rejected": {}, "assignments": 0,
                                         "model_epoch": int(time.time() * 1000)}
        self.restored = False
        self.broker = BrokerStatus(on_down=lambda: self.metrics.ready.set(0))
        self.heartbeat = time.monotonic()
        self.stop_event = threading.Event()
        self._stop_requested_at: float | None = None
        self._lock = threading.Lock()
        cfg = settings.checkpoint
        self.checkpoints = CheckpointPolicy(every_events=cfg.every_events,
                                            every_seconds=cfg.every_seconds,
                                            backoff_initial_s=settings.worker.backoff_initial_s)
        self._last_lag_update = 0.0
        self._last_refit_marker: Any = None
        self._refit_failures_seen = 0
        self._report_codes: tuple[CodeMap | None] | None = None
        self.batches = 0
        self.refits = 0
        self.blocks = AlignedBlocks(settings.worker.batch_max_records)
        self.poll_max_records = settings.worker.batch_max_records  # records a poll may return
        self._binary = settings.model.family == "bernoulli"
        # the largest value + headers one produced message may carry (models, dead letters)
        self._max_message_bytes = settings.kafka.max_request_size - MESSAGE_OVERHEAD_BYTES
        self.publisher = ModelPublisher(sink, self.topics.models, name=settings.model.name,
                                        interval_s=settings.worker.model_publish_interval_s,
                                        max_bytes=self._max_message_bytes)
        source.on_assign = self._on_assign
        source.on_revoke = self._on_revoke

    @property
    def engine(self) -> StreamingHierarchy:
        """The engine (restored or fresh); only valid after :meth:`restore`."""
        if self._engine is None:
            raise RuntimeError("the worker has no engine before restore()")
        return self._engine

    def _start_refits(self) -> None:
        """Learning goes through :class:`~streammom.background_refits.BackgroundRefits`: with
        ``worker.refit_process`` the refits run in a helper process (started with the worker)
        which is waited for here (up to a minute: it imports the library) so the first refit
        does not fall back to the loop; state and outputs are those of inline refits either
        way."""
        w = self.settings.worker
        process = self._refit_process
        self._refits = BackgroundRefits(self.engine, process, binary=self._binary,
                                        max_held_events=w.refit_max_held_events,
                                        max_held_features=w.refit_max_held_features,
                                        labels=refit_labels(w.refit_labels,
                                                            replay=self.exit_when_idle),
                                        on_learned=self._on_learned, on_refit=self._on_refit)
        if process is not None and not process.wait_ready(60.0):
            _log.warning("refit process not ready after 60 s: refits run on the loop until "
                         "it is")

    # ------------------------------------------------------------------ state
    def restore(self) -> None:
        """Load the compiled kernels and the newest checkpoint (or build a fresh engine), and
        publish the metrics.

        Temp files of a checkpoint write killed mid-way are removed first. The checkpoint is
        the newest *valid* one (:meth:`CheckpointStore.load`: a damaged ``checkpoint.smm``
        falls back to ``checkpoint.prev.smm``); if checkpoint files exist but none is valid,
        :class:`~service.checkpoint.NoValidCheckpointError` is raised (``run`` exits 2).
        """
        self._load_kernels()
        self.store.remove_stale_temp_files()
        ckpt = self.store.load()
        m = self.metrics
        if ckpt is not None:
            self._engine = ckpt.engine()
            with self._lock:
                self.offsets = dict(ckpt.offsets)
            self.last_checkpoint_offsets = dict(ckpt.offsets)
            self.counters = restored_counters(ckpt.counters)
            stored_topic_ids = ckpt.counters.get("input_topic_ids") or {}
            m.events_processed.inc(self.counters["processed"])
            for reason, n in self.counters["rejected"].items():
                m.events_rejected.labels(reason=reason).inc(n)
            m.assignments_published.inc(self.counters["assignments"])
            m.last_checkpoint.set(ckpt.created)
            _log.info("restored checkpoint", extra={
                "path": str(ckpt.path or self.store.path), "offsets": offset_labels(ckpt.offsets),
                "model_version": int(self.engine.model_version_)})
        else:
            self._engine = self.engine_factory()
            _log.info("no checkpoint: starting from a fresh engine",
                      extra={"dir": str(self.store.directory)})
            self._check_lost_state()
            stored_topic_ids = {}
        self._check_input_topic(stored_topic_ids)
        self._identify()
        self._start_refits()
        m.observe_vocabulary(self.engine.vocabulary)
        self._last_refit_marker = self._refit_marker()
        self.metrics.observe_model(self.engine)
        self.restored = True
        settle_heap()

    def _load_kernels(self) -> None:
        """Load (or compile) the hot path's kernels before the first batch."""
        t0 = time.perf_counter()
        warm_up()
        murmur2(b"warm-up")  # the producer partitioner's compiled hash
        _log.info("compiled kernels ready", extra={"seconds": round(time.perf_counter() - t0, 3)})

    def _identify(self) -> None:
        """This worker's id (:func:`service.startup.resolve_worker_id`): ``worker.id``, else
        ``kafka.group_instance_id``, else one kept in the checkpoint directory."""
        self.publisher.worker_id = resolve_worker_id(
            self.settings.worker.id or self.settings.kafka.group_instance_id,
            self.worker_id_dir)

    def _check_lost_state(self) -> None:
        """Apply ``checkpoint.on_lost_state`` if the group has committed offsets
        (:func:`service.startup.lost_state_start`)."""
        committed = dict(self._ask_source("committed") or {})
        if not committed:
            return
        policy = self.settings.checkpoint.on_lost_state
        start = lost_state_start(committed, policy, directory=self.store.directory,
                                 group_id=self.settings.kafka.group_id)
        self.metrics.lost_state.labels(policy=policy).inc()
        if start is not None:
            with self._lock:
                self.offsets = start

    def _check_input_topic(self, stored: Any) -> None:
        """Compare the input topic's id with the one the checkpoint was taken on.

        A topic deleted and recreated under the same name gets a new id (Kafka topic UUIDs,
        KIP-516). The state's offsets then point into a log that no longer exists — whatever
        the new log holds at those offsets are other events — so every partition of the
        topic is learned again from its earliest offset (error-level log, counted in
        ``streammom_offset_resets_total``). The current id is kept in the next checkpoint.
        """
        topic = self.topics.input
        current = self._ask_source("topic_id")
        if current is None:
            return
        before = stored.get(topic) if isinstance(stored, dict) else None
        if before is not None and before != current:
            with self._lock:
                parts = sorted(tp for tp in self.offsets if tp[0] == topic)
                old = offset_labels({tp: self.offsets[tp] for tp in parts})
                for tp in parts:
                    self.offsets[tp] = 0
            for t, p in parts:
                self.metrics.offset_resets.labels(topic=t, partition=str(p)).inc()
            _log.error("input topic recreated (its id changed since the checkpoint): learning "
                       "it again from its earliest offsets",
                       extra={"topic": topic, "checkpoint_topic_id": before,
                              "topic_id": current, "state_offsets": old})
        self.counters["input_topic_ids"] = {topic: current}

    def _ask_source(self, method: str) -> Any:
        """Call an optional start-up query of the source, retried with backoff while the broker
        is down; None if the source lacks it or a stop is requested meanwhile."""
        call = getattr(self.source, method, None)
        return None if call is None else self._retrying(call)

    def _retrying(self, call: Callable[[], Any]) -> Any:
        """``call()`` retried with backoff while the broker is down; None if a stop is
        requested meanwhile."""
        w = self.settings.worker
        backoff = w.backoff_initial_s
        while not self.stop_event.is_set():
            try:
                return call()
            except TransportError as exc:
                self.broker.report(False, exc)
                self._backoff_sleep(backoff)
                backoff = min(backoff * 2, w.backoff_max_s)
        return None

    def _refit_marker(self) -> tuple[Any, ...]:
        eng = self.engine
        return (eng.last_refit_time_, eng.last_refit_duration_, int(eng.model_version_))

    # ------------------------------------------------------------------ rebalance callbacks
    def _on_assign(self, tps: list[TopicPartition]) -> None:
        """Seek gained partitions to the offsets the state belongs to, or else back to the
        first pending record a rebalance dropped (:meth:`AlignedBlocks.take_resume`); runs on
        the IO thread of some clients: only non-blocking calls."""
        with self._lock:
            self.blocks.drop(tps)
            seek = self.blocks.take_resume(tps)  # records a rebalance dropped: read them again
            seek.update({tp: self.offsets[tp] for tp in tps if tp in self.offsets})
        if seek:
            self.source.seek(seek)
        _log.info("partitions assigned", extra={
            "partitions": [f"{t}[{p}]" for t, p in tps], "seek": offset_labels(seek)})

    def _on_revoke(self, tps: list[TopicPartition]) -> None:
        with self._lock:
            self.blocks.drop(tps)
        if tps:  # a group's first join revokes nothing: there is nothing to hand over
            self.checkpoints.request()
        _log.info("partitions revoked", extra={"partitions": [f"{t}[{p}]" for t, p in tps]})

    # ------------------------------------------------------------------ health
    def request_stop(self) -> None:
        """Ask the loop to finish the current batch and shut down (signal-handler safe)."""
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        self.stop_event.set()

    def health(self) -> tuple[bool, dict[str, Any]]:
        age = time.monotonic() - self.heartbeat
        ok = age <= self.settings.worker.heartbeat_timeout_s
        return ok, {"heartbeat_age_seconds": round(age, 3)}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """``/readyz``: ready when partitions are assigned, the state is restored, a model
        exists, the broker is reachable and the last checkpoint write did not fail
        (``checkpoint``: False from a failed write until one succeeds)."""
        assigned = bool(self.source.assignment())
        model = self._engine is not None and self._engine.model_ is not None
        broker, checkpoint = self.broker.ok, self.checkpoints.ok
        ok = assigned and self.restored and model and broker and checkpoint
        self.metrics.ready.set(1 if ok else 0)
        return ok, {"assigned": assigned, "restored": self.restored, "model": model,
                    "broker": broker, "checkpoint": checkpoint}

    def _beat(self) -> None:
        self.heartbeat = time.monotonic()

    # ------------------------------------------------------------------ loop
    def run(self, *, max_batches: int | None = None) -> int:
        """Run until stopped (or idle, or ``max_batches``); returns the process exit code.

        The BLAS/OpenMP pools are limited to ``worker.blas_threads`` meanwhile (threadpoolctl).
        """
        with threadpool_limits(limits=self.settings.worker.blas_threads):
            return self._run(max_batches)

    def _run(self, max_batches: int | None) -> int:
        if not self.restored:
            try:
                self.restore()
            except (NoValidCheckpointError, StateLostError) as exc:
                _log.error("cannot start: the state cannot be restored safely",
                           extra={"error": str(exc)})
                self._close()
                return EXIT_CANNOT_START
        w = self.settings.worker
        backoff = w.backoff_initial_s
        batches = 0
        while not self.stop_event.is_set():
            self._beat()
            try:
                records = self.source.poll(self.poll_max_records, self.poll_timeout())
            except TransportError as exc:
                self.broker.report(False, exc)
                self._backoff_sleep(backoff)
                backoff = min(backoff * 2, w.backoff_max_s)
                continue
            backoff = w.backoff_initial_s
            self.broker.probe(self.source)
            ready = self.take_ready(records)
            if ready:
                if not self.process_batch(ready):
                    return self._abort()
                batches += 1
                if max_batches is not None and batches >= max_batches:
                    break
            elif not records:
                if not self._idle():
                    return self._abort()
                if self.exit_when_idle and not self.blocks.pending and self._source_drained():
                    break
            self.readiness()
        return self.shutdown()

    def take_ready(self, records: list[Record]) -> list[Record]:
        """The polled records to process now: whole aligned blocks
        (:meth:`AlignedBlocks.take_ready`), or none while the input is paused for backpressure
        (:meth:`_backpressure`). Paused, a poll comes back empty because the input is paused,
        not because it is caught up, so the records pending from before the pause stay
        pending: released, they would go to ``learn`` with the held events at their bound and
        wait there for the helper's refit, the stall the pause is there to avoid (up to 1.1 s
        on a backlog, BENCHMARKS.md). :data:`HOLD_BLOCKS` blocks' worth are released all the
        same (a source still returning records while paused: memory stays bounded, ``learn``
        waits)."""
        blocks = self.blocks
        with self._lock:
            if self._paused_since is not None and self._holdable(len(records)):
                blocks.hold(records)
                return []
            return blocks.take_ready(records, self.source.lag)

    def _holdable(self, n_records: int) -> bool:
        """``n_records`` more can wait in the aligned blocks' pending records: they stay
        under :data:`HOLD_BLOCKS` blocks."""
        return len(self.blocks.pending) + n_records < HOLD_BLOCKS * self.blocks.block

    def _held_back(self, rest: int, block: int, *, first: bool) -> bool:
        """Whether the last ``rest`` records of a batch, from an aligned block of ``block``
        records on, wait for the refit running in the helper instead of being learned now: the
        input is paused (a block before them paused it), or learning that block would wait inside
        :meth:`BackgroundRefits.learn`; then it pauses the input now. The pause, sized for a
        poll, does not see that coming when a block is longer than a poll (a poll across
        partitions ends blocks at each one's boundaries), nor when the catching up on held
        batches before the block starts the next refit with most of them still held (the
        young stream's chain of refits; :meth:`BackgroundRefits.make_room` does that catching
        up first). Never when they could not all be held (:meth:`_holdable`): a source that
        goes on returning records while paused then waits inside ``learn``, its memory
        bounded."""
        refits = self._refits
        if refits is None or not self._holdable(rest):
            return False
        if not first and self._paused_since is not None:
            return True
        refits.make_room(block)  # as learn would: collect a finished refit, catch up
        return self._backpressure(refits, need=block)

    def _unread(self, records: list[Record]) -> bool:
        """:meth:`AlignedBlocks.unread` under the lock the rebalance callbacks take."""
        with self._lock:
            return self.blocks.unread(records)

    def _source_drained(self) -> bool:
        if getattr(self.source, "exhausted", False):
            return True
        lag = self.source.lag()
        return bool(self.source.assignment()) and bool(lag) and sum(lag.values()) == 0

    def _backoff_sleep(self, seconds: float) -> None:
        """Sleep in short slices, keeping the heartbeat fresh (/healthz stays 200)."""
        end = time.monotonic() + seconds
        while True:
            self._beat()
            left = end - time.monotonic()
            if left <= 0:
                return
            self._sleep(min(left, 0.25))

    # ------------------------------------------------------------------ one batch
    def process_batch(self, records: list[Record]) -> bool:
        """Process polled records end to end; False if their outputs could not be flushed
        before the shutdown deadline (the caller then exits without a checkpoint).

        The engine is called once per offset-aligned block of ``batch_max_records``
        (:class:`~service.aligned_blocks.AlignedBlocks`; a poll normally returns exactly one).
        When a block pauses the input (:meth:`_backpressure`: it started a refit in the helper
        with the held events near their bound), the blocks after it go back to the front of
        the pending records, unprocessed, instead of waiting for the helper inside ``learn``;
        the batch covers the blocks before them. (Unless a rebalance dropped partitions since
        they were taken: they are then processed as taken, :meth:`AlignedBlocks.unread`.)
        """
        t0 = time.perf_counter()
        blocks = self.blocks.split(records)
        done = 0
        result = BatchResult()
        self._batch = result
        try:
            for i, block in enumerate(blocks):
                if self._held_back(len(records) - done, len(block), first=i == 0) \
                        and self._unread(records[done:]):
                    break
                done += len(block)
                events = [event for _, event in self._valid_events(block, result)]
                if events:
                    self._learn_and_assign(events, result)
        finally:
            self._batch = None
        result.records = done
        return self._finish_batch(records[:done], result, t0)

    def _valid_events(self, block: list[Record], result: BatchResult
                      ) -> list[tuple[Record, Event]]:
        """Decode and validate a block: the valid events with their records; every other
        record is dead-lettered and counted in ``result.rejected``."""
        decoded = self.decoder.decode_many([r.value for r in block])
        valid: list[tuple[Record, Event]] = []
        for rec, item in zip(block, decoded, strict=True):
            if rec.unreadable is not None:
                item = Rejection(UNREADABLE, rec.unreadable)
            if isinstance(item, Rejection):
                self._dead_letter(rec, item)
                result.rejected[item.reason] = result.rejected.get(item.reason, 0) + 1
            else:
                valid.append((rec, item))
        return valid

    def _finish_batch(self, records: list[Record], result: BatchResult, t0: float) -> bool:
        """After a batch's outputs were produced: publish the model if due, flush (False if
        that failed before the shutdown deadline), advance the offsets, checkpoint if due."""
        self._maybe_publish_model()
        if not self._flush():
            return False
        self._advance(records, result)
        self.metrics.batch_duration.observe(time.perf_counter() - t0)
        self._maybe_checkpoint(result)
        self._update_lag(force=False)
        self.batches += 1
        return True

    def _dead_letter(self, rec: Record, rej: Rejection) -> None:
        """Produce the dead letter of ``rec`` (:func:`service.dead_letters.dead_letter`)."""
        letter = dead_letter(rec, rej, budget=self._max_message_bytes,
                             service_version=__version__)
        if letter.original_bytes is not None:
            _log.warning("dead letter too large for the producer: truncated copy",
                         extra={"bytes": letter.original_bytes, "kept": len(letter.value or b""),
                                "offset": rec.offset})
        self.sink.produce(self.topics.dead_letters, letter.key, letter.value, letter.headers)
        _log.debug("dead-lettered", extra={"reason": rej.reason, "offset": rec.offset})

    def _learn_and_assign(self, events: list[Event], result: BatchResult) -> None:
        """Learn the events (now, or once the refit running in the helper is collected:
        :class:`~streammom.background_refits.BackgroundRefits`); their assignments are
        produced when they are learned (:meth:`_on_learned`)."""
        refits = self._refits
        assert refits is not None
        before = self.refits
        refits.learn(event_features(events), event_timestamps(events), token=events)
        result.refitted |= self.refits > before
        result.model_version = int(self.engine.model_version_)
        self._observe_refits()

    def _on_learned(self, events: list[Event], X: Any, routing: Routing) -> None:
        """A batch was learned: produce its assignments, counted with the batch being
        processed, or at once when it was learned outside one (idle, before a checkpoint)."""
        result = self._batch if self._batch is not None else BatchResult()
        self.metrics.observe_vocabulary(self.engine.vocabulary, X)
        self.metrics.observe_refit_schedule(self.engine)
        self._produce_assignments(events, routing, result)
        if self._batch is None:
            self._count_assignments(result)

    def _observe_refits(self) -> None:
        refits = self._refits
        if refits is None:
            return
        self.metrics.refit_held_events.set(refits.held_events)
        failures = refits.helper_failures - self._refit_failures_seen
        if failures:
            self.metrics.refit_process_failures.inc(failures)
            self._refit_failures_seen = refits.helper_failures
        self._backpressure(refits)

    def _backpressure(self, refits: BackgroundRefits, need: int | None = None) -> bool:
        """Pause the input while a refit runs in the helper and the next batch would take the
        events held past ``worker.refit_max_held_events``; resume when it fits (design §6).

        The bound keeps the held events' memory in check. Without the pause the next batch
        would wait inside :meth:`BackgroundRefits.learn` for the refit (0.3–1 s on a backlog:
        no poll, heartbeat or lag export meanwhile); paused, the loop goes on polling (nothing
        comes), waiting for the helper in slices of :data:`PAUSED_WAIT_S`
        (:meth:`poll_timeout`), and collects the refit as soon as it ends. What the worker
        learns and assigns is unchanged: the batches are cut at the same aligned offsets.

        The next batch is ``need`` events, by default a poll's worth or the first aligned
        block of the records pending, whichever is longer. Returns whether the input is
        paused."""
        full = refits.pending and refits.would_wait(  # pending first: no scan of the records
            need if need is not None else max(self.poll_max_records,
                                              self.blocks.first_block_size()))
        if full == (self._paused_since is not None):
            return full
        now = time.monotonic()
        if full:
            self.source.pause()
            self._paused_since = now
        else:
            self.source.resume()
            assert self._paused_since is not None
            self.metrics.input_paused_seconds.inc(now - self._paused_since)
            self._paused_since = None
        self.metrics.input_paused.set(int(full))
        _log.debug("input paused" if full else "input resumed",
                   extra={"held_events": refits.held_events})
        return full

    def poll_timeout(self) -> float:
        """The next source poll's timeout: ``worker.poll_timeout_s``, or 0 while the input is
        paused, after waiting up to :data:`PAUSED_WAIT_S` for the helper's refit and collecting
        it if it ended (the idle step after the empty poll learns the held batches into it)."""
        refits = self._refits
        if self._paused_since is None or refits is None:
            return self.settings.worker.poll_timeout_s
        if refits.poll(timeout=PAUSED_WAIT_S):
            self._observe_refits()  # collected: resume once the held events fit again
        return 0.0

    def _catch_up(self, *, wait: bool) -> bool:
        """Learn the held events and flush their assignments: after swapping in a refit the
        helper has finished (no wait: the idle loop), or after waiting for the one running
        (``wait``: before a checkpoint or the final model, so the state and the outputs cover
        every event whose offset the worker has advanced past). False if the flush failed
        past the shutdown deadline."""
        refits = self._refits
        if refits is None:
            return True
        if not refits.holding:
            self._observe_refits()  # a refit collected with nothing held: resume the input
            return True
        if wait:
            refits.settle()
        else:
            refits.poll()
            refits.drain()  # no batch is arriving: catch up at once
        self._observe_refits()
        return self._flush()

    def _produce_assignments(self, events: list[Event], routing: Routing,
                             result: BatchResult) -> None:
        """One assignment per event: key = entity, the JSON value of
        :func:`~service.pipeline.assignment_values` (``model_version`` in it), no headers.

        A header costs kafka-python ~4 µs of Python per record (validated, sized and encoded
        record by record: BENCHMARKS.md, issue #14), ~5 % of the loop's time per event, for a
        field the value already carries."""
        produce = self.sink.produce
        topic = self.topics.assignments
        for event, value in zip(events, assignment_values(events, routing), strict=True):
            produce(topic, event.key.encode(), value)
        result.processed += len(events)
        result.model_version = int(routing.model_version)

    def _note_refit(self, result: BatchResult) -> None:
        """After a learn call: if the engine refitted, export the new model's metrics, log it,
        rewrite the report and ask for a checkpoint (``checkpoint.on_refit``)."""
        engine = self.engine
        result.model_version = int(engine.model_version_)
        marker = self._refit_marker()
        if marker == self._last_refit_marker:
            return
        result.refitted = True
        self._record_refit(engine)

    def _on_refit(self, engine: StreamingHierarchy) -> None:
        """Every refit of the worker's :class:`BackgroundRefits`, on the loop or collected
        from the helper: the engine after it becomes the worker's, and the refit is recorded."""
        self._engine = engine
        self._record_refit(engine)

    def _record_refit(self, engine: StreamingHierarchy) -> None:
        """Export the new model's metrics, log the refit, rewrite the report and ask for a
        checkpoint (``checkpoint.on_refit``)."""
        self._last_refit_marker = self._refit_marker()
        self.refits += 1
        duration = engine.last_refit_duration_
        if duration is not None:
            self.metrics.refit_duration.observe(float(duration))
        # light refits run on this process's loop; a state back from the helper is a full one
        light = bool(engine.last_refit_light_)
        self.metrics.refits.labels(kind="light" if light else "full").inc()
        self.metrics.last_refit.set(time.time())
        self.metrics.observe_model(self.engine)
        _log.info("refit", extra={"model_version": int(engine.model_version_),
                                  "leaves": int(engine.model_.n_leaves), "duration_s": duration,
                                  "events_seen": int(engine.n_events_seen_), "light": light})
        self._write_report()
        if self.settings.checkpoint.on_refit:  # the new model on disk soon after it exists
            self.checkpoints.request(urgent=False)

    def _write_report(self) -> None:
        """Rewrite the configured HTML report of the current model (never stops the loop)."""
        cfg = self.settings.report
        if cfg.path is None:
            return
        try:
            model, info = from_engine(self.engine, source="daemon")
            if self._report_codes is None:
                self._report_codes = (resolve_codes(cfg.codes, model.feature_names),)
            write_report(model, info, cfg.path, self._report_codes[0])
        except (OSError, ValueError) as exc:
            _log.error("report not written", extra={"path": str(cfg.path), "error": str(exc)})

    def _maybe_publish_model(self, *, force: bool = False) -> None:
        self.publisher.maybe_publish(self.engine.model_, version=int(self.engine.model_version_),
                                     epoch=self.counters["model_epoch"], force=force)

    @property
    def worker_id(self) -> str:
        return self.publisher.worker_id  # the models-topic key's suffix ("" before restore)

    @property
    def model_key(self) -> bytes:
        return self.publisher.key  # <model.name>/<worker id>

    def _flush(self) -> bool:
        """Flush the sink until everything is acknowledged, retrying with backoff; False only
        when a requested shutdown waited longer than ``shutdown_timeout_s``.

        Waits in slices of ≤ 1 s so the heartbeat stays fresh and an outage shows on /readyz
        quickly: a slice that times out marks the broker down at once if the client reports it
        disconnected, else after ``flush_timeout_s`` without acknowledgement.
        """
        w = self.settings.worker
        backoff = w.backoff_initial_s
        slice_s = min(1.0, w.flush_timeout_s)
        started = time.monotonic()
        while True:
            self._beat()
            try:
                self.sink.flush(slice_s)
            except TransportError as exc:
                probe = getattr(self.source, "connected", None)
                if (time.monotonic() - started >= w.flush_timeout_s
                        or (probe is not None and not probe())):
                    self.broker.report(False, exc)
                if (
                    self._stop_requested_at is not None
                    and time.monotonic() - self._stop_requested_at > w.shutdown_timeout_s
                ):
                    _log.error("giving up flushing at shutdown; exiting without a checkpoint "
                               "(the unflushed events will be replayed)")
                    return False
                self._backoff_sleep(backoff)
                backoff = min(backoff * 2, w.backoff_max_s)
                continue
            if not self.broker.ok:
                self.broker.probe(self.source)
            return True

    def _advance(self, records: list[Record], result: BatchResult) -> None:
        first: dict[TopicPartition, int] = {}
        latest: dict[TopicPartition, int] = {}
        for rec in records:
            tp = (rec.topic, rec.partition)
            first.setdefault(tp, rec.offset)
            latest[tp] = rec.offset + 1
        with self._lock:
            for tp, nxt in latest.items():
                stored = self.offsets.get(tp, -1)
                if first[tp] < stored:
                    self._offset_reset(tp, stored, first[tp])
                    self.offsets[tp] = nxt
                elif nxt > stored:
                    self.offsets[tp] = nxt
        self._count_assignments(result)
        self.checkpoints.add_records(len(records))

    def _count_assignments(self, result: BatchResult) -> None:
        """Add a batch's events (processed, rejected) and assignments to the counters."""
        self._count(result)
        self.counters["assignments"] += result.processed
        self.metrics.assignments_published.inc(result.processed)

    def _count(self, result: BatchResult) -> None:
        """Add a batch's valid and rejected events to the counters and their metrics."""
        c = self.counters
        c["processed"] += result.processed
        for reason, n in result.rejected.items():
            c["rejected"][reason] = c["rejected"].get(reason, 0) + n
            self.metrics.events_rejected.labels(reason=reason).inc(n)
        self.metrics.events_processed.inc(result.processed)

    def _offset_reset(self, tp: TopicPartition, stored: int, first: int) -> None:
        """Records came from *behind* the offset the state covers: the worker always seeks to
        that offset, so the client reset the position (offset out of range: the topic was
        deleted and recreated, or its log truncated). The records are new: they are learned
        once, and the stored offset is lowered to what was actually consumed, so a restart
        does not seek out of range again and re-count them (issue #12, item 3)."""
        self.metrics.offset_resets.labels(topic=tp[0], partition=str(tp[1])).inc()
        _log.error(
            "input offset reset: the partition's log no longer holds the state's offset "
            "(topic recreated or truncated?); learning its records from the reset position "
            "and storing the offsets actually consumed",
            extra={"partition": f"{tp[0]}[{tp[1]}]", "state_offset": stored,
                   "reset_to": first},
        )

    #: The roles that learn with refits (``all``) run them in a helper process when
    #: ``worker.refit_process`` is on; the learner refits on its loop, ingest never does.
    refits_in_helper = True

    #: Scheduled checkpoints are copied on the loop and written to the checkpoint files by a
    #: background thread (:meth:`CheckpointPolicy.begin`); the roles whose checkpoint is a
    #: commit (ingest) or a write to the state topic (learner) turn this off.
    background_checkpoints = True

    def _maybe_checkpoint(self, result: BatchResult | None = None) -> None:
        """Finish a background checkpoint that ended; checkpoint when the policy says it is
        due (records, time, a request; never before a failed write's retry time, so a full
        disk is not hit on every batch). A revocation is written on the loop; the rest, in
        the background when the role allows it (design §6 "checkpoints")."""
        self._finish_checkpoint(wait=False)
        if not self.checkpoints.due():
            return
        if self._refits is not None and self._refits.holding and not self.checkpoints.urgent:
            return  # taken once the held events are learned: the state then covers the offsets
        if (self.background_checkpoints and self.settings.checkpoint.background
                and not self.checkpoints.urgent):
            with self._lock:
                offsets = dict(self.offsets)
            self.checkpoints.begin(self.store, self.engine, offsets, self.counters)
            if result is not None:
                result.checkpointed = True
            return
        ok = self.checkpoint()
        if result is not None:
            result.checkpointed = ok

    def _finish_checkpoint(self, *, wait: bool) -> bool | None:
        """The outcome of the background checkpoint if it ended (or ``wait``): its offsets
        are committed once it is durable (:meth:`CheckpointPolicy.finish`)."""
        return self.checkpoints.finish(wait=wait, commit_offsets=self.source.commit,
                                       metrics=self.metrics)

    def checkpoint(self) -> bool:
        """Write the checkpoint (state + offsets), then commit those offsets; False if the
        write failed (:meth:`~service.checkpoint_policy.CheckpointPolicy.commit`: the loop
        goes on uncommitted, not ready, and retries with backoff). A background write still
        in flight is finished first, and a refit running in the helper is waited for (its
        held events learned and their assignments flushed)."""
        if not self._catch_up(wait=True):
            return False
        with self._lock:
            offsets = dict(self.offsets)
        return self.checkpoints.commit(self.store, self.engine, offsets, self.counters,
                                       commit_offsets=self.source.commit, metrics=self.metrics)

    @property
    def last_checkpoint_offsets(self) -> dict[TopicPartition, int]:
        """The offsets the last good checkpoint covers (kept by the checkpoint policy)."""
        return self.checkpoints.last_offsets

    @last_checkpoint_offsets.setter
    def last_checkpoint_offsets(self, offsets: dict[TopicPartition, int]) -> None:
        self.checkpoints.last_offsets = offsets

    def _idle(self) -> bool:
        """Periodic work when a poll returned nothing: a refit the helper finished, model
        publish, time-based checkpoint."""
        if not self._catch_up(wait=False):
            return False
        if self.publisher.due(int(self.engine.model_version_)):
            self._maybe_publish_model()
            if not self._flush():
                return False
        self._maybe_checkpoint()
        self._update_lag(force=True)
        return True

    def _update_lag(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_lag_update < 1.0:
            return
        self._last_lag_update = now
        self.metrics.set_lag(self.source.lag())

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> int:
        """Settle a refit in the helper, publish the model, flush, checkpoint, commit and close;
        0 on success, 1 if outputs could not be flushed
        or the final checkpoint could not be written (then nothing is committed: the events
        since the last good checkpoint are replayed on the next start)."""
        _log.info("shutting down", extra={"processed": self.counters["processed"]})
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        if not self._catch_up(wait=True):  # the last refit and its held events, before the model
            return self._abort()
        if self._engine is not None:
            self._maybe_publish_model(
                force=self.publisher.published_version != int(self._engine.model_version_))
        if not self._flush():
            return self._abort()
        self._finish_checkpoint(wait=True)
        if self._engine is not None and self._checkpoint_due_at_shutdown() \
                and not self.checkpoint():
            _log.error("final checkpoint failed; exiting 1 without committing (the events "
                       "since the last checkpoint are replayed on the next start)",
                       extra={"dir": str(self.store.directory),
                              "processed": self.counters["processed"]})
            return self._abort()
        self._close()
        _log.info("stopped", extra={"processed": self.counters["processed"],
                                    "offsets": offset_labels(self.offsets)})
        return 0

    def _checkpoint_due_at_shutdown(self) -> bool:
        """Work since the last checkpoint, or no checkpoint written yet."""
        return self.checkpoints.pending or not self.store.path.exists()

    def _abort(self) -> int:
        self._close()
        return 1

    def _close(self) -> None:
        self._finish_checkpoint(wait=True)
        if self._refit_process is not None:
            self._refit_process.close()  # a refit still running is dropped with the process
        self.checkpoints.close()
        for closer in (self.source.close, self.sink.close):
            try:
                closer()
            except Exception as exc:
                _log.warning("close failed", extra={"error": repr(exc)})
        self.metrics.ready.set(0)
