"""CLI commands through typer's CliRunner: schema, config show, demo, fit/assign/inspect, run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.commands.demo import adjusted_rand_index
from service.commands.produce import produce_sample
from streammom import StreamingHierarchy

runner = CliRunner()


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_schema_is_json_schema() -> None:
    schema = json.loads(_ok(["schema"]))
    assert "encounter" in json.dumps(schema) and "document" in json.dumps(schema)


def test_config_show_formats_and_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[topics]\ninput = "from-toml"\n')
    out = _ok(["config", "show", "--config", str(cfg), "--set", "model.max_leaves=9"])
    assert 'input = "from-toml"' in out and "max_leaves = 9" in out
    data = json.loads(_ok(["config", "show", "--format", "json"]))
    assert data["http"]["port"] == 9108
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka]\nbogus = 1\n")
    assert runner.invoke(app, ["config", "show", "--config", str(bad)]).exit_code != 0


def test_version() -> None:
    assert _ok(["--version"]).startswith("streammom ")


def test_ari() -> None:
    assert adjusted_rand_index([0, 0, 1, 1], [5, 5, 7, 7]) == pytest.approx(1.0)
    assert adjusted_rand_index([0, 1, 0, 1], [0, 0, 1, 1]) < 0.01


def test_demo_small() -> None:
    from service.synthetic import all_codes, code_description

    out = _ok(["demo", "--patients", "3000"])
    assert "SYNTHETIC" in out and "ARI" in out and "events/s" in out
    # the tree names its top codes with their real ICD-10-CM descriptions
    flat = " ".join(out.split())
    named = [c for c in all_codes() if f"{c} {code_description(c)}" in flat]
    assert len(named) >= 4, named


def test_fit_assign_inspect_round_trip(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    produce_sample(events=3000, output=str(events), seed=2, malformed_every=500)
    snap = tmp_path / "model.smm"
    summary = json.loads(_ok(["fit", str(events), "-o", str(snap), "--no-progress",
                              "--set", "model.vocabulary_capacity=128",
                              "--set", "model.refit_every=1000"]).strip().splitlines()[-1])
    assert summary["events"] == 3000 and sum(summary["rejected"].values()) == 6
    assert snap.exists()
    fitted = StreamingHierarchy.restore(snap.read_bytes()).model_
    assert summary["empty_leaves"] == len(fitted.empty_leaves())  # said, never silent
    out = tmp_path / "assign.jsonl"
    _ok(["assign", str(snap), str(events), "-o", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3000 and {"event_id", "leaf_id", "path"} <= set(rows[0])
    tree = json.loads(_ok(["inspect", str(snap), "--json"]))
    assert tree["n_leaves"] >= 1 and len(tree["nodes"]) >= tree["n_leaves"]
    assert all(node["top_features"] for node in tree["nodes"])
    assert "model v" in _ok(["inspect", str(snap)])
    # CSV of code rows
    csv = tmp_path / "rows.csv"
    csv.write_text("I10,E11.9\nJ18.9,A41.9,\n\nF32.9\n")
    snap2 = tmp_path / "csv.smm"
    s2 = json.loads(_ok(["fit", str(csv), "-o", str(snap2), "--no-progress"]).splitlines()[-1])
    assert s2["events"] == 3
    assert s2["stopped"] == {"min_split_weight": 1}  # 3 events: why there is one leaf


def test_fit_says_when_refused_splits_hold_the_tree_below_its_budget(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    produce_sample(events=2000, output=str(events), seed=3)
    result = runner.invoke(app, ["fit", str(events), "-o", str(tmp_path / "m.smm"),
                                 "--no-progress", "--set", "model.min_spectral_gap=1.0"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["leaves"] == 1 and summary["stopped"] == {"split_quality": 1}
    assert "warning: 1 of 16 leaves: splits refused (1 split_quality" in result.stderr


def test_run_embedded_and_resume(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    produce_sample(events=1200, output=str(events), seed=4, malformed_every=300)
    out, dlq, ckpt = tmp_path / "out.jsonl", tmp_path / "dlq.jsonl", tmp_path / "ckpt"
    args = ["run", "--input", str(events), "--output", str(out), "--dead-letters", str(dlq),
            "--checkpoint-dir", str(ckpt), "--set", "model.vocabulary_capacity=128",
            "--set", "worker.batch_max_records=500"]
    _ok(args)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1200
    dead = [json.loads(line) for line in dlq.read_text().splitlines()]
    assert len(dead) == 4 and all("dlq.reason" in d["headers"] for d in dead)
    assert (ckpt / "checkpoint.smm").exists() and (ckpt / "model.smm").exists()
    # a second run over the same file resumes at the checkpoint: nothing new
    _ok(args)
    assert len(out.read_text().splitlines()) == 1200


def test_run_writes_the_report_of_the_current_model_on_refit(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    produce_sample(events=3000, output=str(events), seed=6)
    report = tmp_path / "reports" / "current.html"
    _ok(["run", "--input", str(events), "--output", str(tmp_path / "out.jsonl"),
         "--checkpoint-dir", str(tmp_path / "ckpt"), "--set", "model.vocabulary_capacity=256",
         "--set", "model.refit_every=1000", "--set", "model.min_split_weight=200",
         "--set", f"report.path={report}"])
    html = report.read_text(encoding="utf-8")
    snapshot = tmp_path / "ckpt" / "checkpoint.smm"
    tree = json.loads(_ok(["inspect", str(snapshot), "--json"]))
    # the report shows the model the daemon ended with: one SVG node per tree node
    assert f"model v{tree['model_version']}" in html
    assert html.count('class="node') >= len(tree["nodes"]) > 1


def test_run_embedded_gives_the_outputs_of_refits_on_the_loop(tmp_path: Path) -> None:
    """A replay (``--input``) with the refits in the helper process (the default;
    ``refit_labels=auto`` is ``after_refit`` there) writes the same assignments and the same
    state as with refits on the loop, byte for byte."""
    events = tmp_path / "events.jsonl"
    produce_sample(events=6000, output=str(events), seed=5)
    outputs = {}
    for helper in ("true", "false"):
        out, ckpt = tmp_path / f"out-{helper}.jsonl", tmp_path / f"ckpt-{helper}"
        _ok(["run", "--input", str(events), "--output", str(out), "--checkpoint-dir",
             str(ckpt), "--set", "model.vocabulary_capacity=128",
             "--set", "worker.batch_max_records=250",
             "--set", f"worker.refit_process={helper}"])
        rows = out.read_text().splitlines()
        state = json.loads(_ok(["inspect", str(ckpt / "checkpoint.smm"), "--json"]))
        outputs[helper] = (rows, state)
    rows, state = outputs["true"]
    assert len(rows) == 6000 and len({json.loads(r)["model_version"] for r in rows}) > 2
    assert outputs["true"] == outputs["false"]
