"""Reports: HTML/SVG/PNG views of a snapshot of a KNOWN synthetic hierarchy, code names, CLI."""

from __future__ import annotations

import io
import json
import re
import struct
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from service.cli import app
from service.commands.offline import event_sample_items
from service.commands.report import inspect_snapshot, run_report
from streammom.datasets import HierarchyTruth, make_hierarchical_bernoulli
from streammom.hierarchical import HierarchicalMoM
from streammom.model import HierarchyModel, TreeNode, map_router
from streammom.report import (
    CsvNames,
    Icd10Names,
    build_report,
    compute_figures,
    export_figures,
    from_engine,
    load_codes,
    load_model,
    write_report,
)
from streammom.report.png import TITLE_H
from streammom.report.terminal import render_tree, tree_summary
from streammom.serialization import SnapshotFormatError, archive_bytes

N_LEAVES = 4
D = 120
BLOCK = 6


# ----------------------------------------------------------------------------- fixtures
def _names(d: int) -> list[str]:
    return [f"F{i:03d}" for i in range(d)]


def _model_from_truth(truth: HierarchyTruth, names: list[str]) -> HierarchyModel:
    """The exact generating hierarchy as a model: heap-numbered nodes, MAP routers."""
    k = truth.prevalence.shape[0]
    n_nodes = 2 * k - 1
    leaves_under: dict[int, list[int]] = {}
    for v in reversed(range(n_nodes)):
        leaves_under[v] = (
            [v - (k - 1)] if v >= k - 1 else leaves_under[2 * v + 1] + leaves_under[2 * v + 2]
        )
    weight = {v: float(truth.leaf_weights[leaves_under[v]].sum()) for v in range(n_nodes)}
    mean = {
        v: truth.leaf_weights[leaves_under[v]] @ truth.prevalence[leaves_under[v]] / weight[v]
        for v in range(n_nodes)
    }
    nodes = []
    for v in range(n_nodes):
        depth = int(np.floor(np.log2(v + 1)))
        if v < k - 1:
            kids = (2 * v + 1, 2 * v + 2)
            router = map_router(
                np.vstack([mean[c] for c in kids]),
                np.array([weight[c] for c in kids]),
                "bernoulli",
            )
            nodes.append(
                TreeNode(
                    v, (v - 1) // 2 if v else -1, depth, 10_000 * weight[v], mean[v], kids, router
                )
            )
        else:
            nodes.append(TreeNode(v, (v - 1) // 2, depth, 10_000 * weight[v], mean[v]))
    return HierarchyModel(
        nodes,
        n_features=len(names),
        family="bernoulli",
        method="truth",
        version=3,
        feature_names=names,
        metadata={"n_events_seen": 10_000, "last_refit_time": 1_767_323_045.0},
    )


@pytest.fixture(scope="module")
def known() -> SimpleNamespace:
    X, y, _, truth = make_hierarchical_bernoulli(
        6000, D, N_LEAVES, block_size=BLOCK, random_state=7, return_truth=True
    )
    names = _names(D)
    model = _model_from_truth(truth, names)
    return SimpleNamespace(X=X, y=y, truth=truth, names=names, model=model)


@pytest.fixture(scope="module")
def snapshot(known: SimpleNamespace, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("snap") / "model.smm"
    path.write_bytes(known.model.to_bytes())
    return path


@pytest.fixture(scope="module")
def events_file(known: SimpleNamespace, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("events") / "events.jsonl"
    lines = []
    X = sp.csr_array(known.X)
    for i in range(1500):
        codes = [known.names[j] for j in X[[i]].indices] + ["UNKNOWN-CODE"]
        lines.append(
            json.dumps(
                {
                    "type": "encounter",
                    "id": f"e{i}",
                    "entity_id": f"p{i}",
                    "ts": 1_767_323_045.0 + i,
                    "codes": codes,
                }
            )
        )
    lines.insert(10, "{not json")
    lines.insert(20, json.dumps({"type": "mystery", "id": "x"}))
    lines.append(
        json.dumps({"type": "document", "id": "d1", "ts": 1.0, "counts": {"F000": 2, "nope": 1}})
    )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def report_html(snapshot: Path, events_file: Path) -> str:
    model, info = load_model(snapshot)
    return build_report(model, info, events=event_sample_items(events_file))


# ----------------------------------------------------------------------------- helpers
def _svg(html: str, cls: str) -> ET.Element:
    match = re.search(rf'<svg class="{cls}".*?</svg>', html, flags=re.S)
    assert match, f"no <svg class={cls!r}> in the report"
    return ET.fromstring(match.group(0))


def _classes(el: ET.Element) -> set[str]:
    return set((el.get("class") or "").split())


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _leaf_signature(truth: HierarchyTruth, leaf: int) -> tuple[set[int], set[int]]:
    """(features of every block on the root→leaf path, features of the leaf's own block)."""
    k = truth.prevalence.shape[0]
    v = k - 1 + leaf
    own = set(truth.blocks[v].tolist())
    path: set[int] = set()
    while True:
        path |= set(truth.blocks[v].tolist())
        if v == 0:
            return path, own
        v = (v - 1) // 2


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


# ------------------------------------------------------------------------------- tests
def test_one_svg_node_element_per_tree_node(known: SimpleNamespace, report_html: str) -> None:
    tree = _svg(report_html, "tree")
    nodes = [el for el in tree.iter() if "node" in _classes(el)]
    assert len(nodes) == len(known.model.nodes)
    assert sorted(int(el.get("data-node-id")) for el in nodes) == sorted(known.model.nodes)
    leaves = {int(el.get("data-node-id")) for el in nodes if "leaf" in _classes(el)}
    assert leaves == set(known.model.leaf_ids)
    # Every node is labelled with its id (leaves also with L1… left to right) and weight.
    leaf_numbers = []
    for el in nodes:
        texts = ["".join(t.itertext()) for t in el.iter("text")]
        nid = el.get("data-node-id")
        if "leaf" in _classes(el):
            head, _, tail = texts[0].partition(" · ")
            assert tail == f"#{nid}" and head.startswith("L")
            leaf_numbers.append(int(head[1:]))
        else:
            assert texts[0] == f"#{nid}"
        assert texts[1].startswith("w ")
    assert sorted(leaf_numbers) == list(range(1, len(leaves) + 1))


def test_node_area_proportional_to_weight(known: SimpleNamespace, report_html: str) -> None:
    tree = _svg(report_html, "tree")
    root_w = known.model.root.weight
    for el in tree.iter("g"):
        if "node" not in _classes(el):
            continue
        r = float(el.find("circle").get("r"))
        w = known.model.nodes[int(el.get("data-node-id"))].weight
        assert r**2 / 34.0**2 == pytest.approx(w / root_w, rel=0.02)


def test_leaf_labels_are_their_signature_features(known: SimpleNamespace, report_html: str) -> None:
    tree = _svg(report_html, "tree")
    k = N_LEAVES
    for el in tree.iter("g"):
        if "leaf" not in _classes(el):
            continue
        leaf = int(el.get("data-node-id")) - (k - 1)  # heap numbering: leaf j is node k-1+j
        labels = [t.get("data-feature") for t in el.iter("text") if "feature" in _classes(t)]
        assert len(labels) == 4
        idx = [known.names.index(code) for code in labels]
        path, own = _leaf_signature(known.truth, leaf)
        assert set(idx) <= path, f"leaf {leaf}: labels {labels} outside its signature"
        assert set(idx) & own, f"leaf {leaf}: no label {labels} from its own block"


def test_fitted_hierarchy_leaf_labels_match_generator() -> None:
    """A HierarchicalMoM fit: each leaf's labels are signature features of its true leaf."""
    X, y, _, truth = make_hierarchical_bernoulli(
        8000, D, N_LEAVES, block_size=BLOCK, random_state=11, return_truth=True
    )
    fitted = HierarchicalMoM(max_depth=2).fit(X).model_
    model = HierarchyModel(
        fitted.nodes.values(),
        n_features=D,
        family=fitted.family,
        method=fitted.method,
        feature_names=_names(D),
    )
    html = build_report(model, None)
    pred = model.predict(X)
    tree = _svg(html, "tree")
    for el in tree.iter("g"):
        if "leaf" not in _classes(el):
            continue
        nid = int(el.get("data-node-id"))
        true_leaf = int(np.bincount(y[pred == nid], minlength=N_LEAVES).argmax())
        path, own = _leaf_signature(truth, true_leaf)
        idx = [int(t.get("data-index")) for t in el.iter("text") if "feature" in _classes(t)]
        assert set(idx) <= path
        assert set(idx) & own


def test_no_external_reference(report_html: str) -> None:
    lowered = report_html.lower()
    for needle in ("http://", "https://", "@import", "url(", "<link", "<iframe", "<img"):
        assert needle not in lowered, needle
    collector = _Collector()
    collector.feed(report_html)
    for tag, attrs in collector.tags:
        for key in ("src", "href", "xlink:href", "action", "data"):
            value = attrs.get(key)
            assert value is None or not (value.startswith("//") or ":" in value), (tag, key)
        assert not (tag == "script" and attrs.get("src")), "external script"
    assert sum(1 for tag, _ in collector.tags if tag == "script") == 1


def test_report_sections_and_metadata(known: SimpleNamespace, report_html: str) -> None:
    for section in ('id="tree"', 'id="frequency"', 'id="heatmap"', 'id="model"', 'id="lineage"'):
        assert section in report_html
    assert "model v3" in report_html
    assert "10,000" in report_html  # events seen
    assert "2026-01-02T03:04:05Z" in report_html  # last refit
    assert "truth / bernoulli" in report_html


def test_frequency_chart_top20_and_leaf_values(known: SimpleNamespace, report_html: str) -> None:
    freq = _svg(report_html, "frequency")
    rows = [el.get("data-feature") for el in freq.iter("g") if "freq-row" in _classes(el)]
    root = known.model.root.mean
    expected = np.lexsort((np.arange(D), -root))[:20]
    assert rows == [known.names[i] for i in expected]
    heads = [el.get("data-column") for el in freq.iter("g") if "freq-head" in _classes(el)]
    figs = compute_figures(known.model)
    assert heads == ["all"] + [f"L{i + 1}" for i in range(len(figs.layout.leaf_order))]
    leaf = figs.layout.leaf_order[0]
    np.testing.assert_allclose(figs.frequency.values[:, 1], known.model.nodes[leaf].mean[expected])


def test_heatmap_sample_routed_and_grouped(
    known: SimpleNamespace, snapshot: Path, events_file: Path, report_html: str
) -> None:
    heat = _svg(report_html, "heatmap")
    bands = [
        (int(el.get("data-leaf")), int(el.get("data-rows")))
        for el in heat.iter("g")
        if "heat-band" in _classes(el)
    ]
    figs = compute_figures(known.model, events=event_sample_items(events_file))
    order = list(figs.layout.leaf_order)
    assert [b[0] for b in bands] == [leaf for leaf in order if leaf in dict(bands)]
    assert sum(n for _, n in bands) == 400
    cols = [el.get("data-feature") for el in heat.iter("text") if "heat-col" in _classes(el)]
    assert len(cols) == 40
    assert figs.heatmap is not None and "2 unreadable" in figs.heatmap.note
    # Rows are routed with the model: the band sizes match routing the same sample.
    again = compute_figures(known.model, events=event_sample_items(events_file))
    assert again.heatmap == figs.heatmap  # seeded sample: deterministic
    other = compute_figures(known.model, events=event_sample_items(events_file), seed=1)
    assert other.heatmap is not None and other.heatmap.cells != figs.heatmap.cells


def test_same_model_same_bytes(snapshot: Path, events_file: Path) -> None:
    m1, i1 = load_model(snapshot)
    m2, i2 = load_model(snapshot.read_bytes())
    i2["source"] = i1["source"]
    a = build_report(m1, i1, codes="icd10", events=event_sample_items(events_file))
    b = build_report(m2, i2, codes="icd10", events=event_sample_items(events_file))
    assert a.encode() == b.encode()


def test_png_and_svg_exports(known: SimpleNamespace, events_file: Path, tmp_path: Path) -> None:
    figs = compute_figures(known.model, events=event_sample_items(events_file))
    written = export_figures(figs, png_dir=tmp_path / "png", svg_dir=tmp_path / "svg")
    names = sorted(p.name for p in written)
    assert names == sorted(
        ["tree.png", "frequency.png", "heatmap.png", "tree.svg", "frequency.svg", "heatmap.svg"]
    )
    for p in written:
        data = p.read_bytes()
        if p.suffix == ".png":
            w, h = _png_size(data)
            assert w >= 300 and h >= 200 and len(data) > 5000
        else:
            root = ET.fromstring(data)
            assert root.tag == "{http://www.w3.org/2000/svg}svg"
    tree_w, tree_h = _png_size((tmp_path / "png" / "tree.png").read_bytes())
    # the PNG is the layout plus a title band
    assert (tree_w, tree_h) == (round(figs.layout.width), round(figs.layout.height + TITLE_H))
    nodes = [el for el in ET.parse(tmp_path / "svg" / "tree.svg").iter() if "node" in _classes(el)]
    assert len(nodes) == len(known.model.nodes)


def test_icd10_names_dotted_and_undotted() -> None:
    import simple_icd_10_cm as cm

    names = Icd10Names()
    assert names.name("I509") == cm.get_description("I50.9") == "Heart failure, unspecified"
    assert names.name("I50.9") == names.name("i50.9") == "Heart failure, unspecified"
    assert names.name("I509Z") == "Heart failure, unspecified"  # closest known ancestor
    assert names.name("E119") == cm.get_description("E11.9")
    assert names.name("not a code") is None


def test_icd10_names_in_report() -> None:
    mean0 = np.array([0.6, 0.3, 0.2])
    model = HierarchyModel(
        [TreeNode(0, -1, 0, 50.0, mean0)], n_features=3, feature_names=["I509", "E11.9", "LOCAL1"]
    )
    html = build_report(model, None, codes="icd10")
    tree = _svg(html, "tree")
    labels = {
        t.get("data-feature"): "".join(t.itertext())
        for t in tree.iter("text")
        if "feature" in _classes(t)
    }
    assert labels["I509"].startswith("I509 Heart failure")  # truncated to fit the node
    assert labels["E11.9"].startswith("E11.9 Type 2 diabetes")
    assert labels["LOCAL1"].startswith("LOCAL1 ")  # unknown code: shown as is
    tooltip = tree.find(".//g[@data-node-id='0']/title").text
    assert "I509 Heart failure, unspecified" in tooltip  # full names in the tooltip
    assert "Type 2 diabetes mellitus without complications" in html  # and the leaves table


def test_csv_code_map(tmp_path: Path) -> None:
    path = tmp_path / "icd9.csv"
    path.write_text(
        "code,name\n428,Heart failure\n250.00,Diabetes mellitus\n# comment\n", encoding="utf-8"
    )
    names = load_codes(str(path))
    assert isinstance(names, CsvNames)
    assert names.name("428.0") == names.name("4281") == "Heart failure"
    assert names.name("25000") == "Diabetes mellitus"
    assert names.name("999") is None
    bad = tmp_path / "bad.csv"
    bad.write_text("onlyone\n", encoding="utf-8")
    with pytest.raises(ValueError, match="code,name"):
        load_codes(str(bad))


def test_icd9_keyword_and_bad_codes_path() -> None:
    assert load_codes("icd9").name("4280") == "Congestive heart failure, unspecified"
    with pytest.raises(ValueError, match="icd10"):
        load_codes("/no/such/file.csv")


def test_bad_snapshots_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(SnapshotFormatError, match="not a streammom snapshot"):
        load_model(b"definitely not a zip archive")
    other = tmp_path / "other.smm"
    other.write_bytes(archive_bytes({"format": "streammom", "kind": "mystery"}, {}))
    with pytest.raises(SnapshotFormatError, match=r"unsupported archive kind 'mystery'"):
        load_model(other)
    broken = archive_bytes(
        {"format": "streammom", "kind": "hierarchy-model", "schema_version": 1}, {}
    )
    with pytest.raises(SnapshotFormatError, match="hierarchy model"):
        load_model(broken)
    with pytest.raises(FileNotFoundError, match="snapshot not found"):
        load_model(tmp_path / "missing.smm")
    junk = tmp_path / "junk.smm"
    junk.write_text("hello", encoding="utf-8")
    err = tmp_path / "err.txt"
    with err.open("w") as fh:
        assert run_report(junk, tmp_path / "out.html", err=fh) == 2
    assert err.read_text().startswith("error: ") and "not a streammom snapshot" in err.read_text()
    assert not (tmp_path / "out.html").exists()


def test_engine_info_lineage_and_vocabulary(known: SimpleNamespace, tmp_path: Path) -> None:
    """A live engine (duck-typed): its lineage, counters and vocabulary reach the report."""
    from dataclasses import dataclass

    @dataclass
    class Change:
        kind: str
        node_id: int
        children: tuple[int, ...]
        version: int
        time: float

    bare = HierarchyModel(known.model.nodes.values(), n_features=D, version=9)
    engine = SimpleNamespace(
        model_=bare,
        lineage_=[
            Change("split", i, (2 * i + 1, 2 * i + 2), i + 1, 1_767_300_000.0 + i)
            for i in range(25)
        ],
        n_events_seen_=123_456,
        last_refit_time_=1_767_323_045.0,
        vocabulary=SimpleNamespace(names=known.names[:-2]),
    )
    model, info = from_engine(engine)
    assert model.feature_names[:3] == ("F000", "F001", "F002")
    assert model.feature_names[-1] == f"#{D - 1}"  # unused capacity
    assert info["events_seen"] == 123_456 and len(info["lineage"]) == 25
    path = write_report(model, info, tmp_path / "sub" / "report.html")
    html = path.read_text(encoding="utf-8")
    assert "123,456" in html and "The 20 most recent of 25 structural changes" in html
    lineage = re.search(r'<table class="lineage">.*?</table>', html, flags=re.S).group(0)
    assert lineage.count("<tr>") == 21 and "<th>kind</th>" in lineage
    assert "2026-01-02T03:04:05Z" in html
    assert not list((tmp_path / "sub").glob(".*.tmp"))  # atomic write left no temp file


def test_streaming_engine_snapshot(tmp_path: Path) -> None:
    """A real StreamingHierarchy snapshot: model, vocabulary names, lineage, events seen."""
    from service.synthetic import all_codes, generate_cohort
    from streammom.engine import StreamingHierarchy
    from streammom.vocab import Vocabulary

    cohort = generate_cohort(4000, seed=2)
    engine = StreamingHierarchy(
        vocabulary=Vocabulary(all_codes()), max_depth=2, refit_every=1000, min_split_weight=300
    )
    for start in range(0, len(cohort), 1000):
        engine.learn(cohort.codes[start : start + 1000])
    path = tmp_path / "engine.smm"
    path.write_bytes(engine.snapshot())
    model, info = load_model(path)
    assert info["kind"] == "streaming-hierarchy"
    assert info["events_seen"] == 4000
    assert info["model_version"] == engine.model_.version == model.version
    assert len(info["lineage"]) == len(engine.lineage_) > 0
    assert model.feature_names is not None and "I50.9" in model.feature_names
    html = build_report(model, info, codes="icd10")
    assert 'id="lineage"' in html and "structural changes" in html
    assert "Heart failure, unspecified" in html
    assert len([m for m in re.finditer(r'class="node (?:leaf|internal)"', html)]) == len(
        model.nodes
    )
    # The daemon's checkpoints (engine + offsets) are accepted by the CLI commands too.
    from service.checkpoint import encode_checkpoint

    checkpoint = tmp_path / "checkpoint.smm"
    checkpoint.write_bytes(encode_checkpoint(engine, {("events", 0): 4000}, created=1.0))
    out = tmp_path / "from-checkpoint.html"
    assert run_report(checkpoint, out, codes="icd10") == 0
    assert "Heart failure, unspecified" in out.read_text(encoding="utf-8")


def test_terminal_tree_and_json(known: SimpleNamespace) -> None:
    from rich.console import Console

    console = Console(width=140, record=True, file=io.StringIO())
    console.print(render_tree(known.model, {"events_seen": 10_000}, None, 3))
    text = console.export_text()
    for nid in known.model.nodes:
        assert f"#{nid}" in text
    assert "(100.0%)" in text and "10,000 events seen" in text
    summary = tree_summary(known.model, {}, None, 3)
    assert summary["nodes"][0]["id"] == known.model.root_id
    assert all(len(n["top_features"]) == 3 for n in summary["nodes"])
    json.dumps(summary)


# ------------------------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def demo_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo-like model: the SYNTHETIC ICD-10-CM cohort, fitted by HierarchicalMoM."""
    from service.synthetic import generate_cohort

    cohort = generate_cohort(4000, seed=3)
    X, codes = cohort.matrix()
    fitted = HierarchicalMoM(max_depth=2).fit(X).model_
    model = fitted.replace(version=4, feature_names=codes)
    path = tmp_path_factory.mktemp("demo") / "demo-model.smm"
    path.write_bytes(model.to_bytes())
    return path


def test_cli_report_with_exports(demo_snapshot: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(
        app,
        [
            "report",
            str(demo_snapshot),
            "-o",
            str(out),
            "--png",
            str(tmp_path / "png"),
            "--svg",
            str(tmp_path / "svg"),
        ],
    )
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert "Heart failure, unspecified" in html  # --codes auto detected ICD-10-CM
    assert (tmp_path / "png" / "tree.png").stat().st_size > 5000
    assert (tmp_path / "svg" / "frequency.svg").exists()
    none = tmp_path / "plain.html"
    result = CliRunner().invoke(
        app, ["report", str(demo_snapshot), "-o", str(none), "--codes", "none"]
    )
    assert result.exit_code == 0, result.output
    assert "Heart failure, unspecified" not in none.read_text(encoding="utf-8")


def test_cli_report_bad_snapshot(tmp_path: Path) -> None:
    bad = tmp_path / "bad.smm"
    bad.write_bytes(b"garbage")
    result = CliRunner().invoke(app, ["report", str(bad), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "not a streammom snapshot" in result.output


def test_cli_inspect_prints_codes_and_names(demo_snapshot: Path) -> None:
    result = CliRunner().invoke(app, ["inspect", str(demo_snapshot)])
    assert result.exit_code == 0, result.output
    assert "I50.9" in result.output and "Heart failure, unspecified" in result.output


def test_inspect_snapshot_function(demo_snapshot: Path, tmp_path: Path) -> None:
    out = tmp_path / "tree.txt"
    with out.open("w") as fh:
        assert inspect_snapshot(demo_snapshot, "icd10", False, top=4, out=fh) == 0
    text = out.read_text()
    assert "#0" in text and "(100.0%)" in text and "Heart failure, unspecified" in text
    with out.open("w") as fh:
        assert inspect_snapshot(demo_snapshot, None, True, out=fh) == 0
    summary = json.loads(out.read_text())
    names = {f["name"] for n in summary["nodes"] for f in n["top_features"]}
    assert "Heart failure, unspecified" in names


def test_inspect_of_an_engine_snapshot_loads_neither_the_engine_nor_scipy(
        tmp_path: Path) -> None:
    """``streammom inspect`` reads the routing model an engine snapshot carries, and imports
    only what that needs: not the engine, its sums' modules, the compiled kernels (numba) or
    scipy — the interpreter start-up is most of the command's time (issue #14: < 1 s for a
    16-leaf snapshot). Checked in a fresh interpreter, after the tree is printed."""
    import subprocess
    import sys

    from streammom import StreamingHierarchy, Vocabulary

    rng = np.random.default_rng(0)
    events = [[f"I{int(c):02d}.{int(c) % 10}" for c in rng.choice(60, 6, replace=False)]
              for _ in range(3_000)]
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=128), max_leaves=4)
    for start in range(0, len(events), 500):
        eng.partial_fit(events[start:start + 500])
    assert eng.model_.n_leaves >= 2
    path = tmp_path / "engine.smm"
    path.write_bytes(eng.snapshot())
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from service.cli import app\n"
        f"result = CliRunner().invoke(app, ['inspect', {str(path)!r}])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(result.output)\n"
        "heavy = ('scipy', 'numba', 'streammom.engine', 'streammom.moments',\n"
        "         'streammom._compiled', 'streammom.estimators')\n"
        "print('LOADED', sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert "LOADED []" in out, out
    assert f"{eng.model_.n_leaves} leaves" in out or "#0" in out, out
