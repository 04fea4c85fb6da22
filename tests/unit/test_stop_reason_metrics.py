"""No silent collapse in the daemon (issue #15 item 4): leaves that will not split are counted
by reason in ``streammom_tree_leaves_stopped`` and a tree held below its leaf budget by refused
splits is logged once per change."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from service.metrics import WorkerMetrics
from streammom import StreamingHierarchy
from streammom.datasets import make_hierarchical_bernoulli


def _fed(**params: float) -> StreamingHierarchy:
    X, *_ = make_hierarchical_bernoulli(4_000, 200, 4, codes_per_event=10.0, random_state=2)
    eng = StreamingHierarchy(200, max_leaves=4, **params)  # type: ignore[arg-type]
    for start in range(0, 4_000, 1_000):
        eng.partial_fit(X[start:start + 1_000])
    return eng


def _stopped(registry: CollectorRegistry, reason: str) -> float | None:
    return registry.get_sample_value("streammom_tree_leaves_stopped", {"reason": reason})


def test_refused_splits_are_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    refused = _fed(min_spectral_gap=1.0)
    with caplog.at_level(logging.WARNING, logger="streammom.worker"):
        metrics.observe_model(refused)
        metrics.observe_model(refused)  # unchanged: not logged again
    assert _stopped(registry, "split_quality") == 1.0
    assert _stopped(registry, "max_leaves") == 0.0
    warnings = [r for r in caplog.records if "splits refused" in r.getMessage()]
    assert len(warnings) == 1 and "1 of 4 leaves" in warnings[0].getMessage()

    caplog.clear()
    full = _fed()
    with caplog.at_level(logging.WARNING, logger="streammom.worker"):
        metrics.observe_model(full)
    assert _stopped(registry, "split_quality") == 0.0
    assert _stopped(registry, "max_leaves") == 4.0
    assert not [r for r in caplog.records if "splits refused" in r.getMessage()]
