"""The daemon loop on the in-memory transport, as the worker unit tests build it: a small,
fast engine; checkpoints every 1,000 events; polls that never wait; refits on the loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service.config import Settings, load_settings
from service.memory_transport import MemoryBroker, MemorySink, MemorySource
from service.metrics import WorkerMetrics
from service.synthetic import generate_cohort
from service.worker import Worker

IN = "streammom.events"

_DEFAULTS: dict[str, dict[str, Any]] = {
    "model": {"max_depth": 2, "max_leaves": 4, "min_split_weight": 100.0,
              "refit_every": 500, "reservoir_size": 256, "vocabulary_capacity": 128},
    # checkpoints on the event schedule only, written on the loop: the tests count them
    # (on_refit and background writes have their own tests)
    "checkpoint": {"every_events": 1000, "every_seconds": 3600, "on_refit": False,
                   "background": False},
    # refits on the loop: which batches a refit in the helper process overlaps depends on
    # timing, and these tests count labels per model version (the helper's own tests:
    # tests/unit/test_background_refits.py, test_worker_refit_process.py)
    "worker": {"batch_max_records": 250, "poll_timeout_s": 0.01,
               "backoff_initial_s": 0.01, "backoff_max_s": 0.05, "refit_process": False},
    "http": {"enabled": False},
}


def small_settings(tmp_path: Path, name: str = "ckpt", **sections: dict[str, Any]) -> Settings:
    """The test settings, checkpoints in ``tmp_path / name``; ``sections`` override keys
    section by section (``worker={"batch_max_records": 100}``)."""
    overrides = {section: dict(values) for section, values in _DEFAULTS.items()}
    overrides["checkpoint"]["dir"] = str(tmp_path / name)
    for section, values in sections.items():
        overrides.setdefault(section, {}).update(values)
    return load_settings(overrides=overrides)


def fill_cohort(broker: MemoryBroker, n: int, *, seed: int = 1) -> None:
    """Append ``n`` synthetic encounters to the one-partition input topic (key = index)."""
    broker.create_topic(IN, 1)
    for i, value in enumerate(generate_cohort(n, seed=seed).event_bytes()):
        broker.append(IN, value, key=str(i).encode())


def memory_worker(settings: Settings, broker: MemoryBroker, **kw: Any) -> Worker:
    """A worker on ``broker``'s input topic that stops when the input is drained."""
    return Worker(settings, MemorySource(broker, IN), MemorySink(broker),
                  metrics=WorkerMetrics(), exit_when_idle=True, **kw)
