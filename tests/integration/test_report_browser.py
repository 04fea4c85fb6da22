"""The HTML report in a real browser: headless Debian ``chromium`` renders it without script
errors and the cluster tree is visible on the first screen.

Two chromium runs with the same window (1400 × 1000): ``--dump-dom`` reads what the report's
inline script wrote on ``<body>`` (``data-rendered``, ``data-errors``, ``data-nodes``,
``data-tree-box`` = where the tree SVG is drawn), then ``--screenshot`` saves the page; the test
checks the PNG's size and that the tree region is drawn (non-background pixels, the leaf colours
present). The screenshot is kept at ``$STREAMMOM_ARTIFACTS/report-screenshot.png`` when that
variable is set (else in the test's temp dir).

Without chromium the test skips, except in CI (``STREAMMOM_REQUIRE_KAFKA=1``, set by
``make test``), where it fails: ``make system-deps`` installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from service.commands.report import run_report
from streammom.hierarchical import HierarchicalMoM
from streammom.model import HierarchyModel
from streammom.report.charts import PALETTE

WINDOW = (1400, 1000)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    message = "Debian chromium is not installed (run `make system-deps`)"
    if os.environ.get("STREAMMOM_REQUIRE_KAFKA") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        f"--user-data-dir={profile}",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


class _Body(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: dict[str, str | None] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.attrs = dict(attrs)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, HierarchyModel]:
    """A demo-like report: SYNTHETIC ICD-10-CM cohort, HierarchicalMoM, events heatmap."""
    from service.synthetic import generate_cohort

    tmp = tmp_path_factory.mktemp("browser")
    cohort = generate_cohort(4000, seed=5)
    X, codes = cohort.matrix()
    fitted = HierarchicalMoM(max_depth=2).fit(X).model_
    model = fitted.replace(version=2, feature_names=codes, metadata={"n_events_seen": len(cohort)})
    snapshot = tmp / "model.smm"
    snapshot.write_bytes(model.to_bytes())
    events = tmp / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in cohort.events()), encoding="utf-8")
    out = tmp / "report.html"
    assert run_report(snapshot, out, events=events, codes="icd10") == 0
    return out, model


def test_report_renders_in_chromium(report: tuple[Path, HierarchyModel], tmp_path: Path) -> None:
    from PIL import Image

    binary = _chromium()
    html_path, model = report
    url = html_path.resolve().as_uri()

    dom = _run_chromium(binary, tmp_path / "profile-dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = _Body()
    body.feed(dom.stdout)
    assert body.attrs.get("data-rendered") == "ok", f"inline script did not run: {body.attrs}"
    assert not body.attrs.get("data-errors"), f"script errors: {body.attrs.get('data-errors')}"
    assert body.attrs.get("data-nodes") == str(len(model.nodes))
    box = [int(v) for v in re.findall(r"-?\d+", body.attrs.get("data-tree-box") or "")]
    assert len(box) == 4, body.attrs
    left, top, width, height = box
    assert width > 300 and height > 300, box
    assert 0 <= top < WINDOW[1] // 2, f"the tree starts below the first half screen: {box}"

    artifacts = os.environ.get("STREAMMOM_ARTIFACTS")
    shot = (Path(artifacts) if artifacts else tmp_path) / "report-screenshot.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    run = _run_chromium(binary, tmp_path / "profile-shot", f"--screenshot={shot}", url)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]

    image = Image.open(shot).convert("RGB")
    assert image.size == WINDOW
    pixels = np.asarray(image, dtype=np.int16)
    region = pixels[top : min(top + height, WINDOW[1]), max(left, 0) : min(left + width, WINDOW[0])]
    assert region.shape[0] > 300 and region.shape[1] > 300
    background = (np.abs(region - 255).sum(axis=2) < 12).mean()
    assert background < 0.985, f"the tree region is blank ({background:.3f} background)"
    assert region.std() > 10.0
    # Every leaf's colour is drawn (its circle), i.e. the whole tree is on screen.
    n_leaves = model.n_leaves
    for colour in PALETTE[:n_leaves]:
        rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
        drawn = 0.9 * rgb + 0.1 * 255  # leaf circles have fill-opacity 0.9 on white
        close = (np.abs(region - drawn).sum(axis=2) < 30).sum()
        assert close > 40, f"leaf colour {colour} not visible in the tree region ({close} px)"
    # Text is rendered (dark pixels: node ids, weights, feature names).
    dark = (region.sum(axis=2) < 200).mean()
    assert dark > 0.002, f"no text in the tree region ({dark:.4f})"
