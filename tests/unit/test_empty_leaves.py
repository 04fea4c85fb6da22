"""Empty leaves are said, never silent (issue #15 item 4): a leaf the refined mixture gives no
events keeps its place in the tree, but the model marks it (``empty_leaves()``, from each leaf
score's share ω_l), ``predict`` never labels with it, snapshots keep the share, the model's
text and ``inspect`` mark it, and the daemon counts it in ``streammom_tree_leaves_empty`` and
logs it once per change."""

from __future__ import annotations

import functools
import io
import logging

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from rich.console import Console

from service.metrics import WorkerMetrics
from streammom import StreamingHierarchy
from streammom.datasets import make_hierarchical_bernoulli
from streammom.model import EMPTY_LEAF_EVENTS, HierarchyModel
from streammom.report.html import build_report
from streammom.report.terminal import render_tree, tree_summary
from streammom.serialization import SnapshotFormatError


@functools.cache
def _short_stream_of_many_clusters() -> tuple[StreamingHierarchy, np.ndarray]:
    """400 events of 16 clusters at d = 1,000, learned at the defaults: 25 events a cluster,
    and the refinement's moves by the evidence merge some of them (design "Empty leaves"; 6
    of 16 empty. At 600 events the scores' climb, :mod:`streammom.evidence_ascent`, now
    keeps all 16)."""
    X, _, _ = make_hierarchical_bernoulli(400, 1_000, 16, codes_per_event=10.0, random_state=0)
    eng = StreamingHierarchy(1_000, max_leaves=16)
    eng.partial_fit(X)
    return eng, X


def test_empty_leaves_are_the_leaves_predict_never_labels() -> None:
    eng, X = _short_stream_of_many_clusters()
    model = eng.model_
    empty = set(model.empty_leaves())
    assert model.n_leaves == 16 and empty  # the tree keeps its leaves; some are empty
    shares = {nid: model.nodes[nid].score.share for nid in model.leaf_ids}  # type: ignore[union-attr]
    assert sum(shares.values()) == pytest.approx(1.0)
    assert empty == {nid for nid, s in shares.items() if s * model.root.weight < EMPTY_LEAF_EVENTS}
    labels = set(np.unique(eng.predict(X)).tolist())
    assert labels.isdisjoint(empty)
    assert labels == set(model.leaf_ids) - empty  # every other leaf labels events


def test_the_shares_survive_snapshots_and_model_archives() -> None:
    eng, _ = _short_stream_of_many_clusters()
    restored = StreamingHierarchy.restore(eng.snapshot())
    assert restored.model_.empty_leaves() == eng.model_.empty_leaves()
    assert restored.snapshot() == eng.snapshot()
    again = HierarchyModel.from_bytes(eng.model_.to_bytes())
    assert again.empty_leaves() == eng.model_.empty_leaves()
    for nid in again.leaf_ids:
        assert again.nodes[nid].score.share == eng.model_.nodes[nid].score.share  # type: ignore[union-attr]


def test_a_model_written_before_the_shares_has_no_empty_leaves_and_a_bad_share_is_refused(
) -> None:
    eng, _ = _short_stream_of_many_clusters()
    manifest, arrays = eng.model_.to_archive()
    old = {**manifest, "nodes": [{k: v for k, v in n.items() if k != "share"}
                                 for n in manifest["nodes"]]}
    model = HierarchyModel.from_archive(old, arrays)
    assert model.empty_leaves() == ()
    assert all(model.nodes[nid].score.share is None for nid in model.leaf_ids)  # type: ignore[union-attr]
    X = _short_stream_of_many_clusters()[1]
    assert np.array_equal(model.predict(X), eng.predict(X))  # the labels do not change
    for bad in (1.5, -0.1, "0.2", True):
        nodes = [dict(n) for n in manifest["nodes"]]
        scored = next(n for n in nodes if "share" in n)
        scored["share"] = bad
        with pytest.raises(SnapshotFormatError, match="share"):
            HierarchyModel.from_archive({**manifest, "nodes": nodes}, arrays)


def test_the_model_text_inspect_and_the_report_mark_the_empty_leaves() -> None:
    eng, _ = _short_stream_of_many_clusters()
    model = eng.model_
    empty = model.empty_leaves()
    text = model.describe(n_top=0)
    assert f"16 leaves ({len(empty)} empty:" in text.splitlines()[0]
    marked = [line for line in text.splitlines() if "[empty: labels no event]" in line]
    assert len(marked) == len(empty)
    nodes = tree_summary(model)["nodes"]
    assert {n["id"] for n in nodes if n["empty"]} == set(empty)
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(render_tree(model))
    rendered = console.export_text()
    assert f"{len(empty)} empty (they label no event)" in rendered
    assert rendered.count("empty: labels no event") == len(empty)
    report = build_report(model)
    assert f"16 leaves ({len(empty)} empty: they label no event)" in report
    assert report.count("empty: labels no event") == len(empty)


def test_the_daemon_counts_empty_leaves_and_logs_them_once_per_change(
        caplog: pytest.LogCaptureFixture) -> None:
    eng, _ = _short_stream_of_many_clusters()
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    with caplog.at_level(logging.WARNING, logger="streammom.worker"):
        metrics.observe_model(eng)
        metrics.observe_model(eng)  # unchanged: not logged again
    n_empty = len(eng.model_.empty_leaves())
    assert registry.get_sample_value("streammom_tree_leaves_empty") == float(n_empty)
    warnings = [r for r in caplog.records if "are empty" in r.getMessage()]
    assert len(warnings) == 1 and f"{n_empty} of the tree's 16 leaves" in warnings[0].getMessage()

    caplog.clear()
    X, _, _ = make_hierarchical_bernoulli(300, 500, 8, codes_per_event=10.0, random_state=0)
    few = StreamingHierarchy(500, max_leaves=8)
    few.partial_fit(X)  # 8 clusters of ~37 events at d = 500: every leaf labels events
    assert few.model_.empty_leaves() == ()
    with caplog.at_level(logging.WARNING, logger="streammom.worker"):
        metrics.observe_model(few)
    assert registry.get_sample_value("streammom_tree_leaves_empty") == 0.0
    assert not [r for r in caplog.records if "are empty" in r.getMessage()]
