"""Publishing the model to the models topic: when, under which key, in which encoding."""

from __future__ import annotations

import logging
import time

from service.pipeline import encode_model_message, model_message_headers
from service.transport import Sink
from streammom import __version__
from streammom.model import HierarchyModel

__all__ = ["ModelPublisher"]

_log = logging.getLogger("streammom.worker")


class ModelPublisher:
    """Publishes a worker's model when its version changed or every ``interval_s``.

    The key is ``<name>/<worker id>`` (:attr:`key`); within one key ``(model_epoch,
    model_version)`` (both in the headers) only grows: the version grows with every refit of
    one state, and a state built from scratch starts a new, later epoch (its creation time in
    ms, kept in the checkpoint). A model too large for ``max_bytes`` even as float16 is logged
    and skipped (it stays in the checkpoint).
    """

    def __init__(self, sink: Sink, topic: str, *, name: str, interval_s: float,
                 max_bytes: int, per_worker: bool = True) -> None:
        self.sink = sink
        self.topic = topic
        self.name = name
        self.interval_s = interval_s
        self.max_bytes = max_bytes
        self.per_worker = per_worker
        self.worker_id = ""
        self.published_version: int | None = None
        self.last_publish = 0.0

    @property
    def key(self) -> bytes:
        """The models-topic key: ``<model.name>/<worker id>`` of a one-process worker, or the
        bare ``<model.name>`` of the scale-out's single learner (``per_worker=False``)."""
        return (f"{self.name}/{self.worker_id}" if self.per_worker else self.name).encode()

    def due(self, version: int) -> bool:
        """True when ``version`` was not published yet or the interval has passed."""
        return (version != self.published_version
                or time.monotonic() - self.last_publish >= self.interval_s)

    def maybe_publish(self, model: HierarchyModel, *, version: int, epoch: int,
                      force: bool = False) -> None:
        """Produce ``model`` (of the engine's ``version``) if :meth:`due` (or ``force``); the
        caller flushes the sink."""
        if not (force or self.due(version)):
            return
        now = time.monotonic()
        self.published_version, self.last_publish = version, now
        try:
            value, dtype = encode_model_message(model, self.max_bytes)
        except ValueError as exc:
            _log.error("model too large for the models topic; not published",
                       extra={"error": str(exc), "model_version": version})
            return
        if dtype != "float32":
            _log.warning("model published with reduced precision",
                         extra={"dtype": dtype, "bytes": len(value)})
        headers = model_message_headers(version=version, epoch=epoch, worker_id=self.worker_id,
                                        dtype=dtype, service_version=__version__)
        self.sink.produce(self.topic, self.key, value, headers)
