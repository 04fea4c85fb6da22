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


def _balanced_model(depth: int, d: int, seed: int) -> HierarchyModel:
    """A complete binary tree of 2**depth leaves over real ICD-10-CM codes (long names)."""
    from service.synthetic import all_codes
    from streammom.model import Router, TreeNode

    rng = np.random.default_rng(seed)
    codes = all_codes()[:d]
    nodes, next_id, frontier = [], 1, [(0, -1, 0, 1.0)]
    while frontier:
        nid, parent, level, share = frontier.pop()
        mean = rng.beta(0.3, 3.0, size=d)
        if level == depth:
            nodes.append(TreeNode(nid, parent, level, 32_000 * share, mean))
            continue
        kids = (next_id, next_id + 1)
        next_id += 2
        router = Router(rng.normal(size=(2, d)), rng.normal(size=2), absolute=False)
        split = float(rng.uniform(0.35, 0.65))
        nodes.append(TreeNode(nid, parent, level, 32_000 * share, mean, kids, router))
        frontier += [(kids[0], nid, level + 1, share * split),
                     (kids[1], nid, level + 1, share * (1 - split))]
    return HierarchyModel(nodes, n_features=d, feature_names=codes)


def test_a_32_leaf_report_is_readable_on_one_screen(tmp_path: Path) -> None:
    """Issue #17 item 11: at 32 leaves the tree fits the window (compact layout), every leaf
    has its own colour and is drawn, leaves are numbered L1…L32 left to right, and the leaf
    table gives every leaf's features in full (no truncation)."""
    from PIL import Image

    binary = _chromium()
    model = _balanced_model(5, 50, seed=3)
    assert model.n_leaves == 32
    snapshot = tmp_path / "model32.smm"
    snapshot.write_bytes(model.to_bytes())
    html_path = tmp_path / "report32.html"
    assert run_report(snapshot, html_path, codes="icd10") == 0
    url = html_path.resolve().as_uri()

    dom = _run_chromium(binary, tmp_path / "profile-dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = _Body()
    body.feed(dom.stdout)
    assert body.attrs.get("data-rendered") == "ok" and not body.attrs.get("data-errors")
    left, top, width, height = (int(v) for v in
                                re.findall(r"-?\d+", body.attrs.get("data-tree-box") or ""))
    assert left >= 0 and left + width <= WINDOW[0], "the tree is wider than the window"
    assert top + height <= WINDOW[1], "the tree does not fit the first screen"
    leaf_labels = re.findall(r'class="node-title"[^>]*>(L\d+)<', dom.stdout)
    assert leaf_labels and sorted(leaf_labels, key=lambda s: int(s[1:])) == [
        f"L{i}" for i in range(1, 33)]
    leaf_rows = re.findall(r"<tr><td[^>]*><span class=\"swatch\"", dom.stdout)
    assert len(leaf_rows) == 32
    assert "…" not in dom.stdout.split('id="leaves"', 1)[1].split("</section>", 1)[0]

    from streammom.report import compute_figures

    colours = list(compute_figures(model).layout.colours[nid]
                   for nid in compute_figures(model).layout.leaf_order)
    rgb = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in colours], dtype=float)
    gaps = np.abs(rgb[:, None, :] - rgb[None, :, :]).sum(axis=2) + np.eye(32) * 999
    assert gaps.min() > 40, "two leaves share (almost) the same colour"

    shot = tmp_path / "report32.png"
    run = _run_chromium(binary, tmp_path / "profile-shot", f"--screenshot={shot}", url)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int16)
    region = pixels[top : top + height, left : left + width]
    for colour, c in zip(colours, rgb, strict=True):
        drawn = 0.9 * c + 0.1 * 255
        close = (np.abs(region - drawn).sum(axis=2) < 24).sum()
        assert close > 20, f"leaf colour {colour} is not visible in the tree ({close} px)"
