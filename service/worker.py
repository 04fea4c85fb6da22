"""The daemon loop: a thin, transport-agnostic loop around :class:`streammom.StreamingHierarchy`.

Per batch (bounded ``max_records``, poll timeout ≤ 1 s)::

    poll → decode/validate (bad → DLQ with the original bytes + dlq.* headers)
         → vocabulary.transform → engine.learn  (ONE vectorised engine call per batch)
         → produce one assignment per valid event (+ the model when its version changed or
           every ``model_publish_interval_s``)
         → flush (retried with backoff until the broker acknowledged everything)
         → advance the in-memory offsets → checkpoint if due → commit the checkpointed offsets

Delivery semantics (design §6):

* **State: exactly once.** The checkpoint (engine + next offsets, one atomic file) is the source
  of truth. On (re)assignment the worker seeks each partition to the offset its in-memory state
  belongs to (the checkpoint's after a restart); partitions it has never seen start from the
  group's committed offset or the earliest one.
* **Kafka commits follow checkpoints.** Only offsets covered by a written checkpoint are
  committed, so a committed offset never runs ahead of durable state (a partition missing from
  the checkpoint can safely fall back to the committed offset). Commits serve lag monitoring and
  tools; the in-process ``streammom_consumer_lag_records`` gauge is exact per batch.
* **Where the state comes from is checked at start-up.** No checkpoint while the group has
  committed offsets means the state was lost: ``checkpoint.on_lost_state`` rebuilds it from the
  earliest retained offsets (default), refuses to start, or resumes
  (:meth:`Worker._check_lost_state`). An input topic whose id changed since the checkpoint, or
  whose log no longer holds the state's offset, is learned again from its earliest offset and
  the offsets actually consumed are stored (:meth:`Worker._check_input_topic`,
  :meth:`Worker._offset_reset`).
* **Models are keyed per worker** (``<model.name>/<worker id>``); within a key
  ``(model_epoch, model_version)`` only grows (:attr:`Worker.model_key`).
* **Outputs: at least once.** A checkpoint is written only after the outputs of every event it
  covers were acknowledged; after a crash the events since the last checkpoint are replayed and
  their assignments produced again (same key, model version in the value and headers).
* **Broker errors** are retried with exponential backoff (never dead-lettered, never fatal); the
  heartbeat keeps ``/healthz`` green while ``/readyz`` reports the outage.
* **Checkpoint write errors** (disk full, permissions, I/O) never stop the loop: nothing is
  committed, readiness is false, and the write is retried with backoff until it succeeds
  (:meth:`Worker.checkpoint`). Damaged checkpoint files fall back to the previous one
  (:meth:`~service.checkpoint.CheckpointStore.load`).
* **Shutdown** (SIGTERM/SIGINT set a flag): finish the batch, flush, checkpoint, commit, close,
  exit 0. If the outputs cannot be flushed within ``shutdown_timeout_s``, or the final
  checkpoint cannot be written, the worker exits 1 *without* a checkpoint or commit, so those
  events are replayed on the next start.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.checkpoint import CheckpointStore, NoValidCheckpointError, encode_checkpoint
from service.config import ModelSettings, Settings
from service.events import UNREADABLE, EventDecoder, Rejection
from service.metrics import WorkerMetrics
from service.transport import Record, Sink, Source, TopicPartition, TransportError
from streammom import __version__, warm_up
from streammom.serialization import atomic_write_bytes

__all__ = ["BatchResult", "StateLostError", "Worker", "build_engine", "encode_model_message"]

_log = logging.getLogger("streammom.worker")
_encode_str: Callable[[str], str] = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
_MODEL_CONTENT_TYPE = b"application/vnd.streammom.model+zip"
#: Exit status when the state cannot be restored safely (no valid checkpoint, or a lost state
#: under ``on_lost_state=refuse``): restarting will not help, the operator must act.
EXIT_CANNOT_START = 2
WORKER_ID_FILE = "worker.id"
_WORKER_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_MESSAGE_OVERHEAD = 4096  # record + batch headers, key, message headers


def build_engine(cfg: ModelSettings) -> Any:
    """A fresh :class:`streammom.StreamingHierarchy` (+ vocabulary) from the model settings."""
    from streammom import StreamingHierarchy, Vocabulary

    if cfg.vocabulary_file is not None:
        vocab = Vocabulary.from_file(cfg.vocabulary_file)
    else:
        vocab = Vocabulary(capacity=cfg.vocabulary_capacity)
    return StreamingHierarchy(
        vocabulary=vocab,
        max_depth=cfg.max_depth,
        max_leaves=cfg.max_leaves,
        min_split_weight=cfg.min_split_weight,
        half_life=cfg.half_life,
        refit_every=cfg.refit_every,
        reservoir_size=cfg.reservoir_size,
        basis_dim=cfg.basis_dim,
        method=cfg.method,
        family=cfg.family,
        random_state=cfg.random_state,
    )


def encode_model_message(model: Any, max_bytes: int) -> tuple[bytes, str]:
    """The compact models-topic value of ``model`` and the dtype used.

    ``HierarchyModel.to_bytes(dtype=float32)`` is already a deflate-compressed archive. If it
    does not fit ``max_bytes`` the arrays are stored as float16 (≈ 3 significant digits: enough
    to route and to rank features, not to resume learning); if that does not fit either a
    :class:`ValueError` is raised (the caller logs it and keeps the model in the checkpoint).
    """
    for dtype, name in ((np.float32, "float32"), (np.float16, "float16")):
        data = model.to_bytes(dtype=dtype)
        if len(data) <= max_bytes:
            return data, name
    raise ValueError(f"model archive is {len(data)} bytes even as float16 > {max_bytes}")


def assignment_values(events: list[Any], routing: Any) -> list[bytes]:
    """The JSON assignment of every event, as ``Routing.records()`` would give, but built from
    the routing arrays with per-leaf cached paths (the per-event work is string joins only).

    ``{"event_id", "entity_id", "leaf_id", "path", "margins", "model_version"}``.
    """
    enc = _encode_str
    leaves = routing.leaf_ids
    paths = routing.paths
    margins = routing.margins
    version = int(routing.model_version)
    cache: dict[int, tuple[str, int]] = {}
    uniq, first = np.unique(leaves, return_index=True)
    for leaf, row in zip(uniq.tolist(), first.tolist(), strict=True):
        path = paths[row]
        depth = int((path >= 0).sum())
        cache[leaf] = (",".join(str(int(v)) for v in path[:depth]), depth - 1)
    out = []
    for event, leaf, margin in zip(events, leaves.tolist(), margins.tolist(), strict=True):
        path, k = cache[leaf]
        entity = getattr(event, "entity_id", None)
        out.append(
            (
                f'{{"event_id":{enc(event.id)},"entity_id":'
                f'{enc(entity) if entity is not None else "null"},"leaf_id":{leaf},'
                f'"path":[{path}],"margins":[{",".join(map(repr, margin[:k]))}],'
                f'"model_version":{version}}}'
            ).encode()
        )
    return out


class StateLostError(RuntimeError):
    """The state was lost (no checkpoint, offsets committed) and ``on_lost_state=refuse``."""


def _offset_labels(offsets: Mapping[TopicPartition, int]) -> dict[str, int]:
    """``{"topic[partition]": offset}`` in partition order, for log records."""
    return {f"{t}[{p}]": o for (t, p), o in sorted(offsets.items())}


def _headers_size(headers: list[tuple[str, bytes]]) -> int:
    """An upper bound of the bytes ``headers`` add to a record, as the producer counts them
    against ``max_request_size``: UTF-8 bytes of each name (not characters), the value, and
    up to 5 + 5 bytes of varint lengths per header (many tiny headers add up)."""
    return sum(len(name.encode("utf-8", "surrogatepass")) + len(value or b"") + 10
               for name, value in headers)


@dataclass
class BatchResult:
    """What one batch did (for tests and logs)."""

    records: int = 0
    processed: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    model_version: int = 0
    refitted: bool = False
    checkpointed: bool = False


class Worker:
    """Consume ``source``, learn with the engine, produce to ``sink``; checkpoint and commit.

    ``engine_factory`` builds a fresh engine when there is no checkpoint (default:
    :func:`build_engine` from ``settings.model``). ``exit_when_idle`` stops the loop when a poll
    returns nothing and the source is exhausted (embedded/file mode, tests).
    """

    def __init__(
        self,
        settings: Settings,
        source: Source,
        sink: Sink,
        *,
        metrics: WorkerMetrics | None = None,
        engine_factory: Callable[[], Any] | None = None,
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
        self.exit_when_idle = exit_when_idle
        self._sleep = sleep
        self.decoder = EventDecoder(settings.limits)
        self.topics = settings.topics
        self.engine: Any = None
        self.offsets: dict[TopicPartition, int] = {}
        self.counters: dict[str, Any] = {"processed": 0, "rejected": {}, "assignments": 0,
                                         "model_epoch": int(time.time() * 1000)}
        self.worker_id = ""
        self._oov_seen = 0
        self._vocabulary_full = False
        self.restored = False
        self.broker_ok = False
        self._broker_auth_failed = False  # a rejected login was logged (once, until recovery)
        self.heartbeat = time.monotonic()
        self.stop_event = threading.Event()
        self._stop_requested_at: float | None = None
        self._lock = threading.Lock()
        self._events_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self._checkpoint_requested = False
        self.checkpoint_ok = True  # False while checkpoint writes fail (readiness "checkpoint")
        self._checkpoint_failures = 0  # consecutive failed writes (retry backoff)
        self._checkpoint_retry_at = 0.0  # monotonic time before which no retry is attempted
        self._published_version: int | None = None
        self._last_publish = 0.0
        self._last_lag_update = 0.0
        self._last_refit_marker: Any = None
        self._report_codes: tuple[Any] | None = None
        self.batches = 0
        self.refits = 0
        self.last_checkpoint_offsets: dict[TopicPartition, int] = {}
        self._pending: list[Record] = []
        self._block = settings.worker.batch_max_records
        self._binary = settings.model.family == "bernoulli"
        # the largest value + headers one produced message may carry (models, dead letters)
        self._max_message_bytes = settings.kafka.max_request_size - _MESSAGE_OVERHEAD
        source.on_assign = self._on_assign
        source.on_revoke = self._on_revoke

    # ------------------------------------------------------------------ state
    def restore(self) -> None:
        """Load the compiled kernels and the newest checkpoint (or build a fresh engine), and
        publish the metrics.

        Temp files of a checkpoint write killed mid-way are removed first. The checkpoint is
        the newest *valid* one (:meth:`CheckpointStore.load`: a damaged ``checkpoint.smm``
        falls back to ``checkpoint.prev.smm``); if checkpoint files exist but none is valid,
        :class:`~service.checkpoint.NoValidCheckpointError` is raised (``run`` exits 2).
        """
        _log.info("compiled kernels ready", extra={"seconds": round(warm_up(), 3)})
        self.store.remove_stale_temp_files()
        ckpt = self.store.load()
        if ckpt is not None:
            self.engine = ckpt.engine()
            with self._lock:
                self.offsets = dict(ckpt.offsets)
            self.last_checkpoint_offsets = dict(ckpt.offsets)
            self.counters = {
                "processed": int(ckpt.counters.get("processed", 0)),
                "rejected": {str(k): int(v) for k, v in ckpt.counters.get("rejected", {}).items()},
                "assignments": int(ckpt.counters.get("assignments", 0)),
                "model_epoch": int(ckpt.counters.get("model_epoch", 0)),
            }
            stored_topic_ids = ckpt.counters.get("input_topic_ids") or {}
            m = self.metrics
            m.events_processed.inc(self.counters["processed"])
            for reason, n in self.counters["rejected"].items():
                m.events_rejected.labels(reason=reason).inc(n)
            m.assignments_published.inc(self.counters["assignments"])
            m.last_checkpoint.set(ckpt.created)
            _log.info(
                "restored checkpoint",
                extra={"path": str(ckpt.path or self.store.path),
                       "offsets": _offset_labels(ckpt.offsets),
                       "model_version": int(self.engine.model_version_)},
            )
        else:
            self.engine = self.engine_factory()
            _log.info("no checkpoint: starting from a fresh engine",
                      extra={"dir": str(self.store.directory)})
            self._check_lost_state()
            stored_topic_ids = {}
        self._check_input_topic(stored_topic_ids)
        self.worker_id = self._resolve_worker_id()
        vocab = self.engine.vocabulary
        self._oov_seen = int(vocab.oov_count)
        self._vocabulary_full = False  # a full vocabulary is reported once per process
        self.metrics.vocabulary_oov.inc(self._oov_seen)
        self.metrics.vocabulary_tokens.set(len(vocab))
        self.metrics.vocabulary_capacity.set(int(vocab.capacity))
        self._last_refit_marker = self._refit_marker()
        self._update_model_metrics()
        self.restored = True

    def _resolve_worker_id(self) -> str:
        """``worker.id``, else ``kafka.group_instance_id``, else the id kept in the checkpoint
        directory (``worker.id``, created on first start): the suffix of this worker's
        models-topic key, so several workers never overwrite each other's model."""
        explicit = self.settings.worker.id or self.settings.kafka.group_instance_id
        if explicit:
            return explicit
        path = self.store.directory / WORKER_ID_FILE
        try:
            kept = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            kept = ""
        if _WORKER_ID.fullmatch(kept):
            return kept
        new_id = uuid.uuid4().hex[:12]
        try:
            atomic_write_bytes(path, new_id.encode("ascii") + b"\n")
        except OSError as exc:
            _log.warning("cannot keep the worker id in the checkpoint directory; using it for "
                         "this run only", extra={"path": str(path), "error": str(exc)})
        return new_id

    def _check_lost_state(self) -> None:
        """Apply ``checkpoint.on_lost_state`` when a start without a checkpoint finds offsets
        committed by the consumer group.

        Offsets are committed only after a checkpoint covering them was written, so committed
        offsets without a checkpoint mean the state was lost (a wiped volume, a changed
        ``checkpoint.dir``): the group's position belongs to a model that no longer exists.
        ``rebuild`` (default) seeks every input partition to its earliest retained offset, so
        the new state counts each retained event once; ``refuse`` raises
        :class:`StateLostError` (exit 2); ``resume`` continues from the committed offsets with
        a fresh model. Each is logged at error level (issue #12, item 6).
        """
        committed = self._committed_offsets()
        if not committed:
            return
        policy = self.settings.checkpoint.on_lost_state
        extra = {"dir": str(self.store.directory), "policy": policy,
                 "committed": _offset_labels(committed)}
        if policy == "refuse":
            _log.error("state lost: no checkpoint but the consumer group has committed offsets; "
                       "refusing to start (checkpoint.on_lost_state=refuse)", extra=extra)
            raise StateLostError(
                f"no checkpoint in {self.store.directory} but consumer group "
                f"{self.settings.kafka.group_id!r} has committed offsets: the state was lost; "
                "restore the checkpoint directory, or set checkpoint.on_lost_state to "
                "'rebuild' (re-learn from the earliest retained offsets) or 'resume'"
            )
        self.metrics.lost_state.labels(policy=policy).inc()
        if policy == "rebuild":
            _log.error("state lost: no checkpoint but the consumer group has committed offsets; "
                       "rebuilding the state from the earliest retained offsets", extra=extra)
            with self._lock:
                self.offsets = dict.fromkeys(committed, 0)
        else:
            _log.error("state lost: no checkpoint but the consumer group has committed offsets; "
                       "resuming from them with a fresh model (earlier events are not in it)",
                       extra=extra)

    def _committed_offsets(self) -> dict[TopicPartition, int]:
        """The group's committed offsets for the input (``{}`` if the source has none)."""
        return dict(self._ask_source("committed") or {})

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
                old = _offset_labels({tp: self.offsets[tp] for tp in parts})
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
        if call is None:
            return None
        w = self.settings.worker
        backoff = w.backoff_initial_s
        while not self.stop_event.is_set():
            try:
                return call()
            except TransportError as exc:
                self._set_broker(False, exc)
                self._backoff_sleep(backoff)
                backoff = min(backoff * 2, w.backoff_max_s)
        return None

    def _refit_marker(self) -> Any:
        return (getattr(self.engine, "last_refit_time_", None),
                getattr(self.engine, "last_refit_duration_", None),
                int(self.engine.model_version_))

    # ------------------------------------------------------------------ rebalance callbacks
    def _on_assign(self, tps: list[TopicPartition]) -> None:
        """Seek gained partitions to the offsets the state belongs to (runs on the IO thread of
        some clients: only non-blocking calls)."""
        with self._lock:
            seek = {tp: self.offsets[tp] for tp in tps if tp in self.offsets}
            self._drop_pending(tps)
        if seek:
            self.source.seek(seek)
        _log.info("partitions assigned", extra={
            "partitions": [f"{t}[{p}]" for t, p in tps],
            "seek": _offset_labels(seek)})

    def _on_revoke(self, tps: list[TopicPartition]) -> None:
        with self._lock:
            self._drop_pending(tps)
        self._checkpoint_requested = True
        _log.info("partitions revoked", extra={"partitions": [f"{t}[{p}]" for t, p in tps]})

    def _drop_pending(self, tps: list[TopicPartition]) -> None:
        gone = set(tps)
        if self._pending and gone:
            self._pending = [r for r in self._pending if (r.topic, r.partition) not in gone]

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
        model = self.engine is not None and getattr(self.engine, "model_", None) is not None
        ok = assigned and self.restored and model and self.broker_ok and self.checkpoint_ok
        self.metrics.ready.set(1 if ok else 0)
        return ok, {
            "assigned": assigned,
            "restored": self.restored,
            "model": model,
            "broker": self.broker_ok,
            "checkpoint": self.checkpoint_ok,
        }

    def _beat(self) -> None:
        self.heartbeat = time.monotonic()

    # ------------------------------------------------------------------ loop
    def run(self, *, max_batches: int | None = None) -> int:
        """Run until stopped (or idle, or ``max_batches``); returns the process exit code."""
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
                records = self.source.poll(w.batch_max_records, w.poll_timeout_s)
            except TransportError as exc:
                self._set_broker(False, exc)
                self._backoff_sleep(backoff)
                backoff = min(backoff * 2, w.backoff_max_s)
                continue
            backoff = w.backoff_initial_s
            self._probe_broker()
            ready = self._take_ready(records)
            if ready:
                if not self.process_batch(ready):
                    return self._abort()
                batches += 1
                if max_batches is not None and batches >= max_batches:
                    break
            elif not records:
                if not self._idle():
                    return self._abort()
                if self.exit_when_idle and self._source_drained():
                    break
            self.readiness()
        return self.shutdown()

    def _source_drained(self) -> bool:
        if getattr(self.source, "exhausted", False):
            return True
        lag = self.source.lag()
        return bool(self.source.assignment()) and bool(lag) and sum(lag.values()) == 0

    def _probe_broker(self) -> None:
        """Ask the source whether its broker answers (non-blocking; e.g. the Kafka source
        also reports a frozen broker whose heartbeats go unanswered) and update readiness."""
        probe = getattr(self.source, "connected", None)
        ok = True if probe is None else bool(probe())
        error = None if ok else getattr(self.source, "probe_error", None)
        if ok != self.broker_ok or getattr(error, "authentication_failed", False):
            self._set_broker(ok, error)

    def _set_broker(self, ok: bool, exc: BaseException | None) -> None:
        """Record whether the broker answers (``/readyz``) and log the transitions.

        A rejected login (``exc`` carries ``authentication_failed``, e.g. the Kafka transport's
        ``AuthenticationError``) is logged once, at error level, even while the broker was
        already down: retrying cannot fix credentials, an operator has to.
        """
        if not ok and getattr(exc, "authentication_failed", False):
            if not self._broker_auth_failed:
                _log.error("authentication failed: the broker rejected the credentials; check "
                           "the kafka security settings (retrying with backoff)",
                           extra={"error": repr(exc)})
            self._broker_auth_failed = True
        elif ok != self.broker_ok:
            if ok:
                _log.info("broker reachable")
            else:
                _log.warning("broker unreachable; retrying with backoff",
                             extra={"error": repr(exc) if exc else None})
        if ok:
            self._broker_auth_failed = False
        self.broker_ok = ok
        if not ok:
            self.metrics.ready.set(0)

    def _backoff_sleep(self, seconds: float) -> None:
        """Sleep in short slices, keeping the heartbeat fresh (/healthz stays 200)."""
        end = time.monotonic() + seconds
        while True:
            self._beat()
            left = end - time.monotonic()
            if left <= 0:
                return
            self._sleep(min(left, 0.25))

    # ------------------------------------------------------------------ aligned blocks
    def _is_boundary(self, rec: Record) -> bool:
        return (rec.offset + 1) % self._block == 0

    def _take_ready(self, polled: list[Record]) -> list[Record]:
        """The records to process now: whole offset-aligned blocks (see :meth:`process_batch`).

        A trailing partial block is held back while more input is known to be waiting, so
        engine calls do not depend on how the client happened to split its fetches; it is
        processed as soon as the poll comes back empty, the source reports no lag, or two
        blocks' worth of records are pending.
        """
        with self._lock:
            if polled:
                self._pending.extend(polled)
            pending = self._pending
            if not pending:
                return []
            cut = len(pending)
            if polled and len(pending) < 2 * self._block and not self._caught_up(pending):
                cut = 0
                for i in range(len(pending) - 1, -1, -1):
                    if self._is_boundary(pending[i]):
                        cut = i + 1
                        break
            ready, self._pending = pending[:cut], pending[cut:]
            return ready

    def _caught_up(self, pending: list[Record]) -> bool:
        lag = self.source.lag()
        tps = {(r.topic, r.partition) for r in pending}
        return all(lag.get(tp) == 0 for tp in tps)

    def _blocks(self, records: list[Record]) -> list[list[Record]]:
        """Split at offset-aligned block boundaries ((offset + 1) % batch_max_records == 0)."""
        blocks: list[list[Record]] = []
        start = 0
        for i, rec in enumerate(records):
            if self._is_boundary(rec):
                blocks.append(records[start : i + 1])
                start = i + 1
        if start < len(records):
            blocks.append(records[start:])
        return blocks

    # ------------------------------------------------------------------ one batch
    def process_batch(self, records: list[Record]) -> bool:
        """Process polled records end to end; False if their outputs could not be flushed
        before the shutdown deadline (the caller then exits without a checkpoint).

        The engine is called once per offset-aligned block of ``batch_max_records`` (a poll
        normally returns exactly one): the engine's refit points and seeded reservoir draws
        depend on its batch boundaries, so aligning them to offsets makes a run resumed from a
        checkpoint reach the same state as an uninterrupted one.
        """
        t0 = time.perf_counter()
        result = BatchResult(records=len(records))
        for block in self._blocks(records):
            decoded = self.decoder.decode_many([r.value for r in block])
            events = []
            for rec, item in zip(block, decoded, strict=True):
                if rec.unreadable is not None:
                    item = Rejection(UNREADABLE, rec.unreadable)
                if isinstance(item, Rejection):
                    self._dead_letter(rec, item)
                    result.rejected[item.reason] = result.rejected.get(item.reason, 0) + 1
                else:
                    events.append(item)
            if events:
                self._learn_and_assign(events, result)
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
        """Produce ``rec`` to the dead-letter topic with why and where it came from.

        The ``dlq.*`` headers are the worker's and come first; a sender's own ``dlq.*``
        headers are kept renamed ``input.dlq.*``, so they can never pass for the real ones.
        A record too large for the producer (``kafka.max_request_size``) is dead-lettered as
        a truncated copy with ``dlq.truncated``, ``dlq.original.bytes`` and
        ``dlq.original.sha256`` (of the whole value), never dropped.
        """
        headers = [
            ("dlq.reason", rej.reason.encode()),
            ("dlq.error", rej.error.encode("utf-8", "replace")),
            ("dlq.source.topic", rec.topic.encode()),
            ("dlq.source.partition", str(rec.partition).encode()),
            ("dlq.source.offset", str(rec.offset).encode()),
            ("dlq.service.version", __version__.encode()),
        ]
        carried = [(f"input.{name}" if name.lower().startswith("dlq.") else name, value)
                   for name, value in rec.headers]
        budget = self._max_message_bytes
        if _headers_size(carried) > budget // 4:  # a sender's headers alone could not fit
            carried = [("dlq.input.headers.dropped", str(len(carried)).encode())]
        headers += carried
        key, value = rec.key, rec.value
        if key is None and value is None:  # a record with neither (or unreadable): Kafka needs one
            value = b""
        room = budget - _headers_size(headers) - 512  # + the truncation headers below
        if len(key or b"") + len(value or b"") > room:
            whole = value or b""
            headers += [("dlq.truncated", b"true"),
                        ("dlq.original.bytes", str(len(whole)).encode()),
                        ("dlq.original.sha256", hashlib.sha256(whole).hexdigest().encode())]
            if key is not None and len(key) > room // 2:
                digest = hashlib.sha256(key).hexdigest().encode()
                headers.append(("dlq.original.key.sha256", digest))
                key = key[: room // 2]
            value = whole[: room - len(key or b"")]
            _log.warning("dead letter too large for the producer: truncated copy",
                         extra={"bytes": len(whole), "kept": len(value), "offset": rec.offset})
        self.sink.produce(self.topics.dead_letters, key, value, headers)
        _log.debug("dead-lettered", extra={"reason": rej.reason, "offset": rec.offset})

    def _learn_and_assign(self, events: list[Any], result: BatchResult) -> None:
        engine = self.engine
        X = engine.vocabulary.transform([e.features() for e in events], binary=self._binary)
        timestamps = np.fromiter((e.ts for e in events), dtype=np.float64, count=len(events))
        self._track_vocabulary(X)
        routing = engine.learn(X, timestamps=timestamps)
        version = int(routing.model_version)
        version_header = [("model_version", str(version).encode())]
        produce = self.sink.produce
        topic = self.topics.assignments
        for event, value in zip(events, assignment_values(events, routing), strict=True):
            produce(topic, event.key.encode(), value, version_header)
        result.processed += len(events)
        result.model_version = int(engine.model_version_)
        marker = self._refit_marker()
        if marker != self._last_refit_marker:
            self._last_refit_marker = marker
            self.refits += 1
            result.refitted = True
            duration = getattr(engine, "last_refit_duration_", None)
            if duration is not None:
                self.metrics.refit_duration.observe(float(duration))
            self.metrics.last_refit.set(time.time())
            self._update_model_metrics()
            _log.info("refit", extra={"model_version": result.model_version,
                                      "leaves": int(engine.model_.n_leaves),
                                      "duration_s": duration,
                                      "events_seen": int(getattr(engine, "n_events_seen_", 0))})
            self._write_report()

    def _track_vocabulary(self, X: Any) -> None:
        """Export the vocabulary's size and out-of-vocabulary drops, and warn once when a
        growing vocabulary fills up (from then on every new token is dropped)."""
        vocab = self.engine.vocabulary
        m = self.metrics
        oov = int(vocab.oov_count)
        if oov > self._oov_seen:
            m.vocabulary_oov.inc(oov - self._oov_seen)
        self._oov_seen = oov
        empty = int(np.count_nonzero(np.diff(X.indptr) == 0))
        if empty:
            m.events_without_features.inc(empty)
        m.vocabulary_tokens.set(len(vocab))
        full = vocab.growing and len(vocab) >= vocab.capacity
        if full and not self._vocabulary_full:
            _log.warning("vocabulary full: tokens not yet in it are dropped from now on "
                         "(streammom_vocabulary_oov_tokens_total counts them)",
                         extra={"capacity": int(vocab.capacity), "oov_tokens": oov})
        self._vocabulary_full = full

    def _write_report(self) -> None:
        """Rewrite the configured HTML report of the current model (never stops the loop)."""
        cfg = self.settings.report
        if cfg.path is None:
            return
        from service.commands.report import resolve_codes
        from streammom.report import from_engine, write_report

        try:
            model, info = from_engine(self.engine, source="daemon")
            if self._report_codes is None:
                self._report_codes = (resolve_codes(cfg.codes, model),)
            write_report(model, info, cfg.path, self._report_codes[0])
        except (OSError, ValueError) as exc:
            _log.error("report not written", extra={"path": str(cfg.path), "error": str(exc)})

    def _update_model_metrics(self) -> None:
        model = self.engine.model_
        self.metrics.model_version.set(int(self.engine.model_version_))
        self.metrics.tree_leaves.set(int(model.n_leaves))
        self.metrics.tree_depth.set(int(model.max_depth))

    def _maybe_publish_model(self, *, force: bool = False) -> None:
        version = int(self.engine.model_version_)
        now = time.monotonic()
        due = now - self._last_publish >= self.settings.worker.model_publish_interval_s
        if not (force or due or version != self._published_version):
            return
        model = self.engine.model_
        try:
            value, dtype = encode_model_message(model, self._max_message_bytes)
        except ValueError as exc:
            _log.error("model too large for the models topic; not published",
                       extra={"error": str(exc), "model_version": version})
            self._published_version, self._last_publish = version, now
            return
        if dtype != "float32":
            _log.warning("model published with reduced precision",
                         extra={"dtype": dtype, "bytes": len(value)})
        headers = [
            ("model_version", str(version).encode()),
            ("model_epoch", str(self.counters["model_epoch"]).encode()),
            ("worker_id", self.worker_id.encode()),
            ("content-type", _MODEL_CONTENT_TYPE),
            ("dtype", dtype.encode()),
            ("service_version", __version__.encode()),
        ]
        self.sink.produce(self.topics.models, self.model_key, value, headers)
        self._published_version, self._last_publish = version, now

    @property
    def model_key(self) -> bytes:
        """The models-topic key of this worker: ``<model.name>/<worker id>``.

        Within one key, ``(model_epoch, model_version)`` (both in the headers) only grows:
        the version grows with every refit of one state, and a state built from scratch (a
        first start, or a lost state rebuilt) starts a new, later epoch (its creation time
        in ms, kept in the checkpoint).
        """
        return f"{self.settings.model.name}/{self.worker_id}".encode()

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
                    self._set_broker(False, exc)
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
            if not self.broker_ok:
                self._probe_broker()
            return True

    def _advance(self, records: list[Record], result: BatchResult) -> None:
        first: dict[TopicPartition, int] = {}
        latest: dict[TopicPartition, int] = {}
        for rec in records:
            tp = (rec.topic, rec.partition)
            if tp not in first:
                first[tp] = rec.offset
            latest[tp] = rec.offset + 1
        with self._lock:
            for tp, nxt in latest.items():
                stored = self.offsets.get(tp, -1)
                if first[tp] < stored:
                    self._offset_reset(tp, stored, first[tp])
                    self.offsets[tp] = nxt
                elif nxt > stored:
                    self.offsets[tp] = nxt
        c = self.counters
        c["processed"] += result.processed
        c["assignments"] += result.processed
        for reason, n in result.rejected.items():
            c["rejected"][reason] = c["rejected"].get(reason, 0) + n
            self.metrics.events_rejected.labels(reason=reason).inc(n)
        self.metrics.events_processed.inc(result.processed)
        self.metrics.assignments_published.inc(result.processed)
        self._events_since_checkpoint += len(records)

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

    def _maybe_checkpoint(self, result: BatchResult | None = None) -> None:
        """Checkpoint when due (every ``every_events`` / ``every_seconds``, or requested by a
        revocation) — but after a failed write not before the retry time :meth:`checkpoint`
        set, so a full disk is not hit on every batch."""
        cfg = self.settings.checkpoint
        due = (
            self._checkpoint_requested
            or self._events_since_checkpoint >= cfg.every_events
            or (
                self._events_since_checkpoint > 0
                and time.monotonic() - self._last_checkpoint >= cfg.every_seconds
            )
        )
        if due and time.monotonic() >= self._checkpoint_retry_at:
            ok = self.checkpoint()
            if result is not None:
                result.checkpointed = ok

    def checkpoint(self) -> bool:
        """Write the checkpoint (state + offsets) atomically, then commit those offsets;
        False if the write failed.

        A write error (:class:`OSError`: ``ENOSPC``, ``EACCES``, ``EIO`` …) does not stop the
        loop: nothing is committed, ``streammom_checkpoint_failures_total`` is incremented,
        ``streammom_last_checkpoint_timestamp_seconds`` stays at the last good one, readiness
        turns false (``checkpoint``) and the error is logged. The in-memory state keeps
        advancing; a crash meanwhile replays the events since the last good checkpoint.
        :meth:`_maybe_checkpoint` retries after ``worker.backoff_initial_s``, doubling per
        consecutive failure up to ``checkpoint.every_seconds``; the first success commits and
        restores readiness.
        """
        with self._lock:
            offsets = dict(self.offsets)
        t0 = time.perf_counter()
        data = encode_checkpoint(self.engine, offsets, self.counters)
        try:
            self.store.save(data)
        except OSError as exc:
            self._checkpoint_failed(exc)
            return False
        if not self.checkpoint_ok:
            _log.info("checkpoint written again; committing",
                      extra={"failed_attempts": self._checkpoint_failures})
        self.checkpoint_ok = True
        self._checkpoint_failures = 0
        self._checkpoint_retry_at = 0.0
        self.metrics.last_checkpoint.set(time.time())
        self._events_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self._checkpoint_requested = False
        self.last_checkpoint_offsets = offsets
        _log.debug("checkpoint written", extra={"bytes": len(data),
                                                "seconds": round(time.perf_counter() - t0, 4)})
        self._commit(offsets)
        return True

    def _checkpoint_failed(self, exc: OSError) -> None:
        """Record a failed checkpoint write and schedule the retry (see :meth:`checkpoint`)."""
        self._checkpoint_failures += 1
        self.checkpoint_ok = False
        self.metrics.checkpoint_failures.inc()
        self.metrics.ready.set(0)
        delay = min(self.settings.worker.backoff_initial_s * 2 ** (self._checkpoint_failures - 1),
                    self.settings.checkpoint.every_seconds)
        self._checkpoint_retry_at = time.monotonic() + delay
        _log.error(
            "checkpoint write failed; not committing, still processing (the events since the "
            "last checkpoint are replayed after a crash); retrying with backoff",
            extra={"dir": str(self.store.directory), "error": str(exc),
                   "errno": errno.errorcode.get(exc.errno or 0, exc.errno),
                   "failures": self._checkpoint_failures, "retry_in_s": round(delay, 3),
                   "last_checkpoint_offsets": _offset_labels(self.last_checkpoint_offsets)},
        )

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        try:
            self.source.commit(offsets)
        except TransportError as exc:
            # advisory only (the checkpoint is the truth); the next checkpoint commits again.
            # Not a readiness signal either: a commit sent during an outage fails afterwards.
            _log.warning("commit failed; will commit with the next checkpoint",
                         extra={"error": repr(exc)})

    def _idle(self) -> bool:
        """Periodic work when a poll returned nothing: model publish, time-based checkpoint."""
        version = int(self.engine.model_version_)
        if version != self._published_version or (
            time.monotonic() - self._last_publish >= self.settings.worker.model_publish_interval_s
        ):
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
        """Flush, checkpoint, commit and close; 0 on success, 1 if outputs could not be flushed
        or the final checkpoint could not be written (then nothing is committed: the events
        since the last good checkpoint are replayed on the next start)."""
        _log.info("shutting down", extra={"processed": self.counters["processed"]})
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        if self.engine is not None:
            self._maybe_publish_model(force=self._published_version != int(
                self.engine.model_version_))
        if not self._flush():
            return self._abort()
        due = self.engine is not None and (self._events_since_checkpoint > 0
                                           or not self.store.path.exists())
        if due and not self.checkpoint():
            _log.error("final checkpoint failed; exiting 1 without committing (the events "
                       "since the last checkpoint are replayed on the next start)",
                       extra={"dir": str(self.store.directory),
                              "processed": self.counters["processed"]})
            return self._abort()
        self._close()
        _log.info("stopped", extra={"processed": self.counters["processed"],
                                    "offsets": _offset_labels(self.offsets)})
        return 0

    def _abort(self) -> int:
        self._close()
        return 1

    def _close(self) -> None:
        for closer in (self.source.close, self.sink.close):
            try:
                closer()
            except Exception as exc:
                _log.warning("close failed", extra={"error": repr(exc)})
        self.metrics.ready.set(0)
