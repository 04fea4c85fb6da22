"""Prometheus metrics of one worker, on a dedicated ``CollectorRegistry`` (testable, no globals).

Names follow the Prometheus conventions (``streammom_`` prefix, base units, ``_total``
counters; the Python client appends ``_total`` itself). Labels are bounded: ``reason``,
``topic``, ``partition`` — never event or entity ids.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import generate_latest

from service.events import REJECT_REASONS, UNREADABLE
from service.transport import TopicPartition
from streammom import StreamingHierarchy, Vocabulary, __version__
from streammom.describe import EMPTY_LEAVES
from streammom.model import FLOOR_SPLIT_ROWS, STOP_REASONS, describe_refusals

__all__ = ["WorkerMetrics"]

_log = logging.getLogger("streammom.worker")
# No ``*_created`` series (one per counter and histogram, doubling the scrape for a start time
# nobody queries): the image set PROMETHEUS_DISABLE_CREATED_SERIES, a pip install did not.
disable_created_metrics()

_BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_REFIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class WorkerMetrics:
    """All daemon metrics, registered on ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.events_processed = Counter(
            "streammom_events_processed", "Valid events learned and assigned.", registry=r
        )
        self.events_rejected = Counter(
            "streammom_events_rejected",
            "Invalid events sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=r,
        )
        self.batch_duration = Histogram(
            "streammom_batch_duration_seconds",
            "Wall time to process one polled batch (decode, learn, produce, flush).",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.consumer_lag = Gauge(
            "streammom_consumer_lag_records",
            "Records not yet processed per input partition (high watermark - position).",
            ["topic", "partition"],
            registry=r,
        )
        self.model_version = Gauge(
            "streammom_model_version", "Version of the current model.", registry=r
        )
        self.refit_duration = Histogram(
            "streammom_refit_duration_seconds",
            "Duration of model refits.",
            buckets=_REFIT_BUCKETS,
            registry=r,
        )
        self.refits = Counter(
            "streammom_refits_total",
            "Refits that produced a new model, by kind: full (moments, growth, refinement) or "
            "light (the refinement alone, while the cost budget cannot afford a full one).",
            ["kind"],
            registry=r,
        )
        for kind in ("full", "light"):
            self.refits.labels(kind=kind)
        self.last_refit = Gauge(
            "streammom_last_refit_timestamp_seconds",
            "Unix time of the last refit (wall clock of this worker).",
            registry=r,
        )
        self.events_since_refit = Gauge(
            "streammom_events_since_refit",
            "Events the engine learned since its model's last refit.",
            registry=r,
        )
        self.refit_due_events = Gauge(
            "streammom_refit_due_events",
            "Events since the last refit at which the refit schedule asks for the next one "
            "(growth schedule, refit_every, cost budget; +Inf without an event trigger): "
            "streammom_events_since_refit at or past it means a refit is due or running.",
            registry=r,
        )
        self.leaf_share_shift = Gauge(
            "streammom_leaf_share_shift",
            "Total variation between the leaves' shares of the events learned since the last "
            "refit and their shares of the stream sampled at it (0 to 1): at or past "
            "streammom_leaf_share_shift_threshold the stream has moved (clusters arriving in "
            "phases, a new population) and the next refit runs in full on the budget's credit.",
            registry=r,
        )
        self.leaf_share_shift_threshold = Gauge(
            "streammom_leaf_share_shift_threshold",
            "The shift at which the stream counts as moved: a floor (0.1 after a refit that "
            "found the stream settled, 0.25 after one that found it moved), or three times "
            "the shift a stationary stream shows by chance when that is larger (+Inf before "
            "a split).",
            registry=r,
        )
        self.refit_held_events = Gauge(
            "streammom_refit_held_events",
            "Events read and waiting to be learned and assigned: a refit runs in the helper "
            "process, or the events it held are being caught up.",
            registry=r,
        )
        self.input_paused = Gauge(
            "streammom_input_paused",
            "1 while the input is paused: a refit runs in the helper and the events held meanwhile "
            "are at worker.refit_max_held_events, or their codes at "
            "worker.refit_max_held_features (backpressure; the loop keeps polling).",
            registry=r,
        )
        self.input_paused_seconds = Counter(
            "streammom_input_paused_seconds_total",
            "Time the input spent paused for backpressure (streammom_input_paused).",
            registry=r,
        )
        self.refit_process_failures = Counter(
            "streammom_refit_process_failures_total",
            "Refits the helper process failed (died, errored or timed out); each was done on "
            "the loop instead.",
            registry=r,
        )
        self.tree_leaves = Gauge("streammom_tree_leaves", "Leaves of the current tree.", registry=r)
        self.tree_depth = Gauge("streammom_tree_depth", "Depth of the current tree.", registry=r)
        self.leaves_stopped = Gauge(
            "streammom_tree_leaves_stopped",
            "Leaves of the current tree that will not split, by reason (a leaf with no reason "
            "splits once it has enough new events).",
            ["reason"],
            registry=r,
        )
        self.leaves_empty = Gauge(
            "streammom_tree_leaves_empty",
            "Leaves of the current tree that the refined mixture gives no events: assignments "
            "label their events with other leaves (the refinement merged their clusters).",
            registry=r,
        )
        self.provisional_splits = Gauge(
            "streammom_tree_provisional_splits",
            "Splits of the current tree made by the growth floor of a stream too short for half "
            f"its leaf budget (from as few as {FLOOR_SPLIT_ROWS} rows); the next refit undoes "
            "them and grows the tree again.",
            registry=r,
        )
        self.last_checkpoint = Gauge(
            "streammom_last_checkpoint_timestamp_seconds",
            "Unix time of the last checkpoint written.",
            registry=r,
        )
        self.checkpoint_failures = Counter(
            "streammom_checkpoint_failures",
            "Checkpoint writes that failed (disk full, permission, I/O error); offsets are not "
            "committed and readiness is false until one succeeds.",
            registry=r,
        )
        self.ready = Gauge(
            "streammom_ready",
            "1 when partitions are assigned, state is restored, a model exists and the broker "
            "is reachable.",
            registry=r,
        )
        self.assignments_published = Counter(
            "streammom_assignments_published",
            "Assignment messages produced (acknowledged or queued).",
            registry=r,
        )
        self.messages_dropped = Counter(
            "streammom_messages_dropped",
            "Output messages given up after a non-retriable produce error (too large for the "
            "topic, not authorised), by topic; each is also logged at error level.",
            ["topic"],
            registry=r,
        )
        self.offset_resets = Counter(
            "streammom_offset_resets",
            "Input partitions whose position was reset behind the state's offset (topic "
            "recreated or log truncated).",
            ["topic", "partition"],
            registry=r,
        )
        self.lost_state = Counter(
            "streammom_lost_state",
            "Starts without a checkpoint although the consumer group had committed offsets, "
            "by the policy applied (rebuild, resume).",
            ["policy"],
            registry=r,
        )
        self.vocabulary_tokens = Gauge(
            "streammom_vocabulary_tokens", "Tokens (columns) in the vocabulary.", registry=r
        )
        self.vocabulary_capacity = Gauge(
            "streammom_vocabulary_capacity_tokens",
            "Most tokens the vocabulary can hold.",
            registry=r,
        )
        self.vocabulary_oov = Counter(
            "streammom_vocabulary_oov_tokens",
            "Token occurrences dropped because they are not in the vocabulary (full or fixed).",
            registry=r,
        )
        self.vocabulary_recycled = Counter(
            "streammom_vocabulary_recycled_columns",
            "Vocabulary columns given to a more frequent token (the old token's sums removed).",
            registry=r,
        )
        self.vocabulary_candidates = Gauge(
            "streammom_vocabulary_candidate_tokens",
            "Tokens waiting for a column of the full vocabulary (Misra-Gries counters).",
            registry=r,
        )
        self.events_without_features = Counter(
            "streammom_events_without_features",
            "Valid events every token of which was out of vocabulary (assigned with no features).",
            registry=r,
        )
        # scale-out roles (design §6): ingest workers and the learner
        self.role = Info("streammom_role", "This process's role: all, ingest or learner.",
                         registry=r)
        self.frames_produced = Counter(
            "streammom_frames_produced",
            "Ingest: frames forwarded to the learner (one per input partition and batch).",
            registry=r,
        )
        self.frames_consumed = Counter(
            "streammom_frames_consumed", "Learner: frames read from the frames topic.",
            registry=r,
        )
        self.frame_events_skipped = Counter(
            "streammom_frame_events_skipped",
            "Learner: events of frames at or below the input partition's watermark (frames "
            "produced twice by ingest workers), not learned again.",
            registry=r,
        )
        self.frame_gaps = Counter(
            "streammom_frame_gaps",
            "Learner: frames that started past the watermark of their input partition (input "
            "records lost before an ingest worker read them: retention or a truncated log).",
            registry=r,
        )
        self.learner_active = Gauge(
            "streammom_learner_active",
            "Learner: 1 while this process holds the frames partition (the single writer), 0 "
            "on a standby.",
            registry=r,
        )
        self.state_events = Gauge(
            "streammom_state_events",
            "Learner: valid events in the state this process holds (restored from the "
            "checkpoint plus learned since; each input event once, whatever was replayed).",
            registry=r,
        )
        self.model_epoch = Gauge(
            "streammom_model_epoch",
            "Fencing epoch of the model this process publishes (learner) or routes with "
            "(ingest).",
            registry=r,
        )
        self.build_info = Info("streammom_build", "Build information.", registry=r)
        self.build_info.info({"version": __version__, "python": platform.python_version()})
        for reason in (UNREADABLE, *REJECT_REASONS):
            self.events_rejected.labels(reason=reason)
        self._lag_labels: set[TopicPartition] = set()
        self._oov_seen = 0  # the vocabulary's OOV count already exported
        self._recycled_seen = 0  # the vocabulary's recycled columns already exported
        self._vocabulary_full = False  # a full vocabulary is reported once per process
        self._refused: dict[str, int] = {}  # refused splits last logged
        self._empty = 0  # empty leaves last logged
        self._provisional = 0  # growth-floor splits last seen
        for reason in STOP_REASONS:
            self.leaves_stopped.labels(reason=reason)

    def set_lag(self, lag: Mapping[TopicPartition, int]) -> None:
        """Replace the per-partition lag gauges (removing partitions no longer assigned)."""
        for tp in self._lag_labels - set(lag):
            self.consumer_lag.remove(tp[0], str(tp[1]))
        for (topic, partition), value in lag.items():
            self.consumer_lag.labels(topic=topic, partition=str(partition)).set(value)
        self._lag_labels = set(lag)

    def observe_vocabulary(self, vocab: Vocabulary, X: Any = None) -> None:
        """Export the vocabulary's size and capacity, the out-of-vocabulary drops and recycled
        columns since the last call, the candidates, and the rows of ``X`` left without a
        feature; log once when a growing vocabulary fills up (from then on new tokens are
        dropped until one is frequent enough to take a rare column over)."""
        oov = int(vocab.oov_count)
        if oov > self._oov_seen:
            self.vocabulary_oov.inc(oov - self._oov_seen)
        self._oov_seen = oov
        recycled = int(vocab.recycled_count)
        if recycled > self._recycled_seen:
            self.vocabulary_recycled.inc(recycled - self._recycled_seen)
        self._recycled_seen = recycled
        self.vocabulary_candidates.set(vocab.n_candidates)
        if X is not None:
            empty = int((X.indptr[1:] == X.indptr[:-1]).sum())
            if empty:
                self.events_without_features.inc(empty)
        self.vocabulary_tokens.set(len(vocab))
        self.vocabulary_capacity.set(int(vocab.capacity))
        full = vocab.is_full
        if full and not self._vocabulary_full:
            _log.warning("vocabulary full: new tokens are dropped until one is frequent enough "
                         "to take the rarest column over at a refit "
                         "(streammom_vocabulary_oov_tokens_total, "
                         "streammom_vocabulary_recycled_columns_total)",
                         extra={"capacity": int(vocab.capacity), "oov_tokens": oov})
        self._vocabulary_full = full

    def observe_refit_schedule(self, engine: StreamingHierarchy) -> None:
        """Events since the last refit, where the schedule puts the next
        (:meth:`~streammom.StreamingHierarchy.refit_due_events`) and how far the stream moved
        since (:meth:`~streammom.StreamingHierarchy.share_shift`): O(leaves), exported every
        batch."""
        self.events_since_refit.set(engine.n_events_since_refit_)
        self.refit_due_events.set(engine.refit_due_events())
        shift, threshold = engine.share_shift()
        self.leaf_share_shift.set(shift)
        self.leaf_share_shift_threshold.set(threshold)

    def observe_model(self, engine: StreamingHierarchy) -> None:
        """The model's version, leaves, depth, why leaves stop and how many are empty; a tree
        below its leaf budget because splits are refused, and empty leaves, are logged (once
        per change), never silent."""
        model = engine.model_
        self.observe_refit_schedule(engine)
        self.model_version.set(int(engine.model_version_))
        self.tree_leaves.set(int(model.n_leaves))
        self.tree_depth.set(int(model.max_depth))
        stopped = model.stopped_leaves()
        for reason in STOP_REASONS:
            self.leaves_stopped.labels(reason=reason).set(stopped.get(reason, 0))
        refused = model.refused_splits(engine.max_leaves)
        if refused and refused != self._refused:
            _log.warning(
                "the tree has %d of %d leaves: splits refused (%s)", model.n_leaves,
                engine.max_leaves, describe_refusals(refused),
                extra={"leaves": int(model.n_leaves), "max_leaves": int(engine.max_leaves),
                       "refused": refused})
        self._refused = refused
        empty = len(model.empty_leaves())
        self.leaves_empty.set(empty)
        if empty and empty != self._empty:
            _log.warning(
                "%d of the tree's %d leaves are empty: %s", empty, model.n_leaves, EMPTY_LEAVES,
                extra={"leaves": int(model.n_leaves), "empty_leaves": empty})
        self._empty = empty
        provisional = len(model.provisional_splits())
        self.provisional_splits.set(provisional)
        if provisional and not self._provisional:
            _log.info(
                "the stream is too short for half the leaf budget: %d provisional splits (from "
                "as few as %d rows) give the tree %d of %d leaves until the next refit",
                provisional, min(FLOOR_SPLIT_ROWS, engine.min_reservoir_split), model.n_leaves,
                engine.max_leaves,
                extra={"provisional_splits": provisional, "leaves": int(model.n_leaves),
                       "max_leaves": int(engine.max_leaves)})
        self._provisional = provisional

    def exposition(self) -> bytes:
        """The text exposition of the registry."""
        return generate_latest(self.registry)
