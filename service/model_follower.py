"""Following the models topic: the newest model of one key, by fencing epoch then version.

Ingest workers route with the model the learner published last; a learner that takes over
reads the same topic to number its models above every one published before (design §6,
scale-out). A message counts only if its key is the model's name and its ``model_epoch`` /
``model_version`` headers are integers; among those the largest ``(epoch, version)`` wins, so a
model of an older learner generation (a zombie that published after it was replaced) is
ignored, whatever its version. Model archives are parsed by
:meth:`~streammom.model.HierarchyModel.from_bytes` (validated, never unpickled); a message that
fails is logged and skipped.
"""

from __future__ import annotations

import logging

import numpy as np

from service.pipeline import Assigner, FeatureRows, events_matrix, model_assigner
from service.transport import Record, TopicReader
from streammom import CodeRollup, Vocabulary
from streammom.model import HierarchyModel, Routing

__all__ = ["ModelFollower", "root_routing"]

_log = logging.getLogger("streammom.ingest")


def root_routing(n: int, version: int = 0) -> Routing:
    """The routing of ``n`` rows before a model names its features: every row in the root
    leaf 0 (what the one-process worker assigns before its first refit)."""
    return Routing(np.zeros(n, dtype=np.int64), np.zeros((n, 1), dtype=np.int64),
                   np.zeros((n, 0)), version)


def _header_int(rec: Record, name: str) -> int | None:
    for key, value in rec.headers:
        if key == name:
            try:
                return int(value)
            except (TypeError, ValueError):
                return None
    return None


class ModelFollower:
    """The newest model of key ``name`` on the models topic (see the module docstring)."""

    def __init__(self, reader: TopicReader, name: str, rollup: CodeRollup | None = None
                 ) -> None:
        self.reader = reader
        self.key = name.encode()
        self.rollup = rollup  # the learner's code roll-up (the same [model] settings)
        #: ``(epoch, version)`` of the model in use; ``(-1, -1)`` before the first.
        self.current: tuple[int, int] = (-1, -1)
        #: The largest epoch / version seen on the topic under this key (valid or not).
        self.max_epoch = -1
        self.max_version = -1
        self.model: HierarchyModel | None = None
        self.vocabulary: Vocabulary | None = None
        self.route: Assigner | None = None
        self.rejected = 0

    def update(self, timeout_s: float = 0.0) -> bool:
        """Read what arrived; True if a newer model is now in use."""
        best: tuple[tuple[int, int], Record] | None = None
        for rec in self.reader.read(timeout_s):
            if rec.key != self.key or rec.value is None:
                continue
            epoch, version = _header_int(rec, "model_epoch"), _header_int(rec, "model_version")
            if epoch is None or version is None:
                self.rejected += 1
                continue
            self.max_epoch = max(self.max_epoch, epoch)
            self.max_version = max(self.max_version, version)
            if (epoch, version) > self.current and (best is None or (epoch, version) > best[0]):
                best = ((epoch, version), rec)
        if best is None:
            return False
        (epoch, version), rec = best
        try:
            model = HierarchyModel.from_bytes(rec.value or b"")
            # a model published before any event was learned names no feature: root routing
            vocab, route = (model_assigner(model, self.rollup)
                            if any(model.feature_names or ())
                            else (None, None))
        except Exception as exc:  # a bad archive must not stop routing with the current one
            self.rejected += 1
            _log.error("model message not usable; keeping the current model",
                       extra={"offset": rec.offset, "model_epoch": epoch,
                              "model_version": version, "error": repr(exc)})
            return False
        self.current, self.model = (epoch, version), model
        self.vocabulary, self.route = vocab, route
        _log.info("following a new model", extra={"model_epoch": epoch, "model_version": version,
                                                   "leaves": int(model.n_leaves)})
        return True

    def catch_up(self, timeout_s: float = 0.5) -> None:
        """Read until the topic's current end (start-up, take-over)."""
        while True:
            self.update(timeout_s)
            if self.reader.caught_up():  # every record up to the end has been returned
                return

    def assign(self, items: FeatureRows, *, binary: bool) -> Routing:
        """Route events (or code rows) with the model in use: their rows over the model's
        features (0/1 if ``binary``, else counts), or the root leaf before a model names its
        features."""
        if self.route is None or self.vocabulary is None:
            return root_routing(len(items), max(self.current[1], 0))
        return self.route(events_matrix(self.vocabulary, items, binary=binary))
