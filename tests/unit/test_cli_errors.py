"""The one error layer of the command line (issue #17, item 4): every user mistake answers with
at most three lines on stderr — ``error: …`` — and exit status 2, never a traceback; the
traceback is there with ``--debug``. Run as a user runs it: a real process."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from cli_process import run_cli


def _assert_user_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert 1 <= len(lines) <= 3 and "Traceback" not in result.stderr, result.stderr
    assert any(line.startswith("error: ") for line in lines), result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_fit_of_a_missing_file(tmp_path: Path) -> None:
    _assert_user_error(run_cli("fit", "nope.jsonl", "-o", "m.smm", cwd=tmp_path), "nope.jsonl")
    debug = run_cli("--debug", "fit", "nope.jsonl", "-o", "m.smm", cwd=tmp_path)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_run_of_a_missing_file_creates_no_output(tmp_path: Path) -> None:
    result = run_cli("run", "--input", "nope.jsonl", "--output", "out.jsonl",
                  "--checkpoint-dir", "ckpt", cwd=tmp_path)
    _assert_user_error(result, "nope.jsonl")
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "ckpt").exists()


def test_http_port_in_use(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text("")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("run", "--input", "in.jsonl", "--output", "out.jsonl", "--checkpoint-dir",
                      "ckpt", "--serve-http", "--http-port", str(port), cwd=tmp_path)
    _assert_user_error(result, str(port), "http.port")


def test_checkpoint_dir_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text("")
    (tmp_path / "afile").write_text("x")
    result = run_cli("run", "--input", "in.jsonl", "--checkpoint-dir", "afile/sub",
                  "--set", "worker.log_format=console", cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) <= 3 and "Traceback" not in result.stderr
    assert "afile/sub" in result.stderr and "not usable" in result.stderr


def test_png_export_without_matplotlib_writes_nothing(tmp_path: Path) -> None:
    from streammom import StreamingHierarchy, Vocabulary

    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=16), refit_every=10**9)
    eng.learn([["a", "b"], ["c"]] * 20)
    (tmp_path / "e.smm").write_bytes(eng.snapshot())
    result = run_cli("report", "e.smm", "-o", "r.html", "--png", "png", cwd=tmp_path,
                  prelude="import sys; sys.modules['matplotlib'] = None")
    _assert_user_error(result, "matplotlib", "streammom[plot]")
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "png").exists()


@pytest.mark.parametrize("args", [["--set", "model.max_dept=3"], ["--set", "model.max_depth=-1"]])
def test_configuration_mistakes(tmp_path: Path, args: list[str]) -> None:
    result = run_cli("config", "show", *args, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 3


def test_producing_to_a_missing_broker_is_a_bounded_wait(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_cli("produce-sample", "--bootstrap-servers", f"127.0.0.1:{port}", "--events",
                  "10", "--timeout", "2", cwd=tmp_path)
    _assert_user_error(result, f"127.0.0.1:{port}", "within 2 s")


# ------------------------------------------------------------------------ CSV input (item 5)
def test_run_refuses_a_csv_with_a_pointer_to_fit(tmp_path: Path) -> None:
    (tmp_path / "codes.csv").write_text("patient,codes\np1,I10;E11.9\n")
    result = run_cli("run", "--input", "codes.csv", "--output", "out.jsonl", cwd=tmp_path)
    _assert_user_error(result, "JSONL", "fit")
    assert not (tmp_path / "out.jsonl").exists()


def test_fit_reads_a_column_of_codes_and_ignores_ids_and_header(tmp_path: Path) -> None:
    import json

    from streammom import StreamingHierarchy

    rows = ["patient,codes,date"] + [f"p{i},I10;E11.9;J44.9,2026-01-01" for i in range(300)]
    (tmp_path / "codes.csv").write_text("\n".join(rows) + "\n")
    result = run_cli("fit", "codes.csv", "-o", "m.smm", "--csv-column", "codes",
                  "--csv-separator", ";", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["events"] == 300
    vocab = StreamingHierarchy.restore((tmp_path / "m.smm").read_bytes()).vocabulary
    assert sorted(t for t in vocab.feature_names if t) == ["E11.9", "I10", "J44.9"]
    missing = run_cli("fit", "codes.csv", "-o", "m2.smm", "--csv-column", "dx", cwd=tmp_path)
    _assert_user_error(missing, "no column 'dx'", "patient, codes, date")


def test_mostly_rejected_input_is_called_out(tmp_path: Path) -> None:
    (tmp_path / "codes.jsonl").write_text("".join(f"p{i},I10,E11.9\n" for i in range(50)))
    result = run_cli("fit", "codes.jsonl", "-o", "m.smm", "--no-progress", cwd=tmp_path)
    assert "warning: 50 of 50 events" in result.stderr and "JSONL" in result.stderr


def test_an_id_column_read_as_codes_is_called_out(tmp_path: Path) -> None:
    rows = ["patient,dx1,dx2"] + [f"p{i},I10,E11.9" for i in range(50)]
    (tmp_path / "codes.csv").write_text("\n".join(rows) + "\n")
    result = run_cli("fit", "codes.csv", "-o", "m.smm", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0
    assert "looks like ids" in result.stderr and "--csv-column" in result.stderr
    clean = run_cli("fit", "codes.csv", "-o", "m.smm", "--no-progress", "--csv-column", "dx1",
                 cwd=tmp_path)
    assert "looks like ids" not in clean.stderr and "--csv-column" not in clean.stderr
    # 50 identical events have no structure: fit says why the tree is one leaf
    assert "splits refused (1 moments" in clean.stderr
