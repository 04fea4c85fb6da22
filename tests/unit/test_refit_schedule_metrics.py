"""The refit schedule as metrics (alert ``StreamMomNoRefit``): the daemon exports the events
learned since the last refit and the count at which its schedule asks for the next, every
batch, so an alert can tell a refit that is due and not completing from a slow or idle stream
whose next refit is simply far away."""

from __future__ import annotations

import math
from pathlib import Path

from memory_harness import fill_cohort, memory_worker, small_settings

from service.memory_transport import MemoryBroker


def _schedule(tmp_path: Path, refit_every: object, n: int = 3_000
              ) -> tuple[float, float, int, float]:
    broker = MemoryBroker()
    fill_cohort(broker, n)
    worker = memory_worker(small_settings(tmp_path, model={"refit_every": refit_every}), broker)
    assert worker.run() == 0
    registry = worker.metrics.registry
    since = registry.get_sample_value("streammom_events_since_refit")
    due = registry.get_sample_value("streammom_refit_due_events")
    assert since is not None and due is not None
    return since, due, worker.engine.n_events_since_refit_, worker.engine.refit_due_events()


def test_the_schedule_is_exported_after_every_batch(tmp_path: Path) -> None:
    # 3,400 events: the last refit (a light one, at 3,000) is before the last batches
    since, due, engine_since, engine_due = _schedule(tmp_path, "auto", 3_400)
    # the last batch's values, not the last refit's: events came after the last refit
    assert since == engine_since > 0
    assert due == engine_due
    assert since < due  # a worker whose refits run is never past its due count


def test_without_an_event_trigger_nothing_is_ever_due(tmp_path: Path) -> None:
    since, due, _, _ = _schedule(tmp_path, None)
    assert since == 3_000 and math.isinf(due)


def test_light_refits_are_counted_apart_from_full_ones(tmp_path: Path) -> None:
    """Once the growth burst is spent and a full refit is not yet affordable, the scheduled
    refits are light: ``streammom_refits_total`` counts each refit that made a new model under
    its kind, and the two kinds add up to the worker's refits."""
    broker = MemoryBroker()
    fill_cohort(broker, 3_000)
    settings = small_settings(tmp_path, model={"refit_every": "auto", "refit_budget": 0.9})
    worker = memory_worker(settings, broker)
    assert worker.run() == 0
    registry = worker.metrics.registry
    full = registry.get_sample_value("streammom_refits_total", {"kind": "full"})
    light = registry.get_sample_value("streammom_refits_total", {"kind": "light"})
    assert full is not None and light is not None
    assert light >= 1 and full >= 1
    assert full + light == worker.refits
    light_versions = {r["version"] for r in worker.engine.lineage_ if r.get("light")}
    assert light == len(light_versions)


def test_the_stream_shift_is_exported_with_its_threshold(tmp_path: Path) -> None:
    """``streammom_leaf_share_shift`` and its threshold are the engine's
    :meth:`~streammom.StreamingHierarchy.share_shift` after the last batch: a stationary
    cohort stays below the threshold, which is at least the settled stream's floor (0.1) once
    the tree split."""
    from streammom.stream_shift import SETTLED_SHIFT

    broker = MemoryBroker()
    fill_cohort(broker, 3_400)
    worker = memory_worker(small_settings(tmp_path, model={"refit_every": "auto"}), broker)
    assert worker.run() == 0
    registry = worker.metrics.registry
    shift = registry.get_sample_value("streammom_leaf_share_shift")
    threshold = registry.get_sample_value("streammom_leaf_share_shift_threshold")
    assert worker.engine.model_.n_leaves > 1
    assert (shift, threshold) == worker.engine.share_shift()
    assert not worker.engine._moved_at_last_refit
    assert 0.0 < shift < threshold and threshold >= SETTLED_SHIFT
