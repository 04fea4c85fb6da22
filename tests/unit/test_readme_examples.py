"""The README's library examples run as written, and do what the text around them says.

A newcomer copies these blocks first; they show the engine at its defaults (only the
features and ``max_leaves``), so they must keep working as the defaults change.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def _run(block: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(block, str(README), "exec"), namespace)  # the project's own README, never input
    return namespace


@pytest.fixture(scope="module")
def blocks() -> list[str]:
    found = _python_blocks()
    assert len(found) == 2, "the README's library section has two examples"
    return found


def test_the_first_example_streams_to_the_clusters_asked_for(blocks: list[str],
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    ns = _run(blocks[0])
    engine, X, y = ns["engine"], ns["X"], ns["y"]
    assert "max_leaves=8" in blocks[0] and "refit_every" not in blocks[0]  # the defaults
    assert len(engine.model_.leaf_ids) == 8
    labels = engine.predict(X)
    assert len(np.unique(labels)) == 8
    # the stream's labels are close to the batch estimators' on the same rows (0.88 measured;
    # HierarchicalMoM 0.82, SpectralMixture 0.73)
    assert adjusted_rand_score(y, labels) >= 0.8
    out = capsys.readouterr().out
    assert "8 leaves" in out and "FeatureScore" in out


def test_the_vocabulary_example_learns_codes_and_routes_them(blocks: list[str],
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    ns = _run(blocks[1])
    engine = ns["engine"]
    assert isinstance(ns["leaf"], int)
    assert engine.n_events_seen_ == 4
    # codes rolled up to their 3-character prefix: E11.9 and E11.65 share one column
    assert engine.vocabulary.index("E11") is not None
    # four events: shorter than the first refit, so one cluster, and the root says why
    root = engine.model_.nodes[engine.model_.root_id]
    assert root.stop_reason == "first_refit"
    assert "1 leaf" in capsys.readouterr().out
