"""Progress on stderr for the long commands (issue #17, item 9): shown when asked (default: on a
terminal), absent otherwise so logs and pipes stay clean."""

from __future__ import annotations

from pathlib import Path

from cli_process import run_cli

from service.commands.produce import produce_sample


def test_fit_and_assign_show_progress_only_when_asked(tmp_path: Path) -> None:
    produce_sample(events=1500, output=str(tmp_path / "ev.jsonl"), seed=1)
    fit = run_cli("fit", "ev.jsonl", "-o", "m.smm", "--progress", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr
    assert "fit" in fit.stderr and "1500 events" in fit.stderr
    quiet = run_cli("assign", "m.smm", "ev.jsonl", "-o", "a.jsonl", cwd=tmp_path)  # not a TTY
    assert quiet.returncode == 0 and quiet.stderr.strip().splitlines() == [
        '{"assigned": 1500, "rejected": 0}']
    shown = run_cli("assign", "m.smm", "ev.jsonl", "-o", "b.jsonl", "--progress", cwd=tmp_path)
    assert "assign" in shown.stderr and "1500 events" in shown.stderr
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_demo_shows_the_events_processed(tmp_path: Path) -> None:
    result = run_cli("demo", "--patients", "1000", "--progress", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "demo" in result.stderr and "1000/1000" in result.stderr
