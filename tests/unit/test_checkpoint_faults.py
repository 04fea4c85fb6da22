"""Checkpoint store faults (issue #12, items 2, 7, 8): damaged checkpoint files fall back to the
previous one (or refuse to start), an unwritable state directory is refused at start-up and a
failing checkpoint write keeps the loop running without committing, and stale temp files of a
killed atomic write are removed at start-up."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from memory_harness import IN, fill_cohort, memory_worker, small_settings
from typer.testing import CliRunner

import service.checkpoint_policy as checkpoint_policy_module
import service.worker as worker_module
from service.checkpoint import (
    CheckpointDirError,
    CheckpointStore,
    NoValidCheckpointError,
    decode_checkpoint,
)
from service.cli import app
from service.commands.produce import produce_sample
from service.config import Settings
from service.memory_transport import MemoryBroker
from service.worker import Worker
from streammom.serialization import SnapshotFormatError, archive_bytes, read_archive

runner = CliRunner()


# --------------------------------------------------------------------------- helpers
@pytest.fixture(autouse=True)
def _keep_logging() -> Any:
    """``streammom run`` installs its JSON handler on the root logger, bound to the CliRunner's
    stream; put the previous configuration back so later tests do not log to a closed file."""
    root, ours = logging.getLogger(), logging.getLogger("streammom")
    saved = (list(root.handlers), root.level, ours.level)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    ours.setLevel(saved[2])


def _written(tmp_path: Path, n: int = 2600) -> tuple[Settings, MemoryBroker, Worker]:
    """A worker that ran to the end of ``n`` events: a checkpoint every 1000 and a final one,
    so ``checkpoint.smm`` holds offset ``n`` and ``checkpoint.prev.smm`` the last 1000s."""
    settings = small_settings(tmp_path)
    broker = MemoryBroker()
    fill_cohort(broker, n)
    worker = memory_worker(settings, broker)
    assert worker.run() == 0
    store = worker.store
    assert decode_checkpoint(store.path).offsets == {(IN, 0): n}
    assert decode_checkpoint(store.previous).offsets == {(IN, 0): (n - 1) // 1000 * 1000}
    return settings, broker, worker


def _flip_middle(path: Path, n: int = 64) -> None:
    raw = bytearray(path.read_bytes())
    mid = len(raw) // 2
    raw[mid : mid + n] = bytes(b ^ 0xFF for b in raw[mid : mid + n])
    path.write_bytes(bytes(raw))


def _truncate(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) * 2 // 3])


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(4096))


def _inconsistent(path: Path) -> None:
    """CRC-valid archive, valid checkpoint manifest, but an engine sum of the wrong shape."""
    manifest, arrays = read_archive(path)
    name = next(k for k in sorted(arrays) if k.endswith("_s"))
    arrays[name] = arrays[name][:-1]
    path.write_bytes(archive_bytes(manifest, arrays))
    decode_checkpoint(path)  # still decodes: only rebuilding the engine finds the damage


DAMAGE = {"flipped": _flip_middle, "truncated": _truncate, "garbage": _garbage,
          "inconsistent": _inconsistent}


class _Clock:
    """``time`` for the worker modules with a movable monotonic clock (backoff without sleeps)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class _Disk:
    """``atomic_write`` of the checkpoint module, failing with ``error`` while full."""

    def __init__(self, real: Any, error: int = errno.ENOSPC) -> None:
        self.real, self.error, self.full, self.attempts = real, error, True, 0

    def __call__(self, path: Any, write: Any) -> int:
        self.attempts += 1
        if self.full:
            raise OSError(self.error, os.strerror(self.error), str(path))
        return self.real(path, write)


# --------------------------------------------------------------------------- item 2
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_store_falls_back_to_previous_on_any_damage(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    worker = _written(tmp_path)[2]
    store = CheckpointStore(worker.store.directory)
    prev_engine = decode_checkpoint(store.previous).engine()
    DAMAGE[damage](store.path)
    with caplog.at_level(logging.INFO, logger="streammom"):
        ckpt = store.load()
    assert ckpt is not None and ckpt.path == store.previous
    assert ckpt.offsets == {(IN, 0): 2000}
    assert ckpt.engine().snapshot() == prev_engine.snapshot()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and errors[0].path == str(store.path) and errors[0].error
    assert any(r.levelno == logging.WARNING and r.path == str(store.previous)
               for r in caplog.records)


@pytest.mark.parametrize("damage", ["flipped", "inconsistent"])
def test_store_refuses_when_both_are_damaged(tmp_path: Path, damage: str) -> None:
    worker = _written(tmp_path)[2]
    store = worker.store
    DAMAGE[damage](store.path)
    DAMAGE[damage](store.previous)
    with pytest.raises(NoValidCheckpointError) as info:
        store.load()
    message = str(info.value)
    assert "\n" not in message
    assert str(store.path) in message and str(store.previous) in message


def test_restore_uses_previous_logs_its_path_and_reaches_the_same_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings, broker, first = _written(tmp_path)
    reference = first.engine.snapshot()
    _flip_middle(first.store.path)
    second = memory_worker(settings, broker)
    with caplog.at_level(logging.INFO, logger="streammom"):
        second.restore()
    # the state is the previous checkpoint's (2000 events), not a fresh engine, not a crash
    assert second.offsets == {(IN, 0): 2000} == second.last_checkpoint_offsets
    assert second.counters["processed"] == 2000
    assert int(second.engine.n_events_seen_) == 2000
    restored = [r for r in caplog.records if r.getMessage() == "restored checkpoint"]
    assert len(restored) == 1 and restored[0].path == str(second.store.previous)
    # replaying 2000..2600 from prev gives the uninterrupted state again (exactly once)
    assert second.run() == 0
    assert second.engine.snapshot() == reference
    assert decode_checkpoint(second.store.path).offsets == {(IN, 0): 2600}


def test_restore_with_inconsistent_current_falls_back(tmp_path: Path) -> None:
    settings, broker, first = _written(tmp_path)
    _inconsistent(first.store.path)
    second = memory_worker(settings, broker)
    second.restore()
    assert second.offsets == {(IN, 0): 2000}


def test_run_refuses_to_start_when_no_checkpoint_is_valid(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    produce_sample(events=600, output=str(events), seed=4)
    out, ckpt = tmp_path / "out.jsonl", tmp_path / "ckpt"
    args = ["run", "--input", str(events), "--output", str(out), "--checkpoint-dir", str(ckpt),
            "--set", "model.vocabulary_capacity=128", "--set", "worker.batch_max_records=200"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    _flip_middle(ckpt / "checkpoint.smm")
    (ckpt / "checkpoint.prev.smm").write_bytes(b"garbage")
    out.unlink()
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)  # a clean exit, not a crash
    assert "Traceback" not in result.output
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    fatal = [r for r in lines if r["level"] == "error" and "no valid checkpoint" in r["error"]]
    assert fatal and str(ckpt / "checkpoint.smm") in fatal[-1]["error"]
    assert not out.exists() or out.read_text() == ""  # nothing (re)produced


def _flip_member(path: Path, member: str, n: int = 16) -> None:
    """Flip ``n`` bytes in the middle of one archive member's stored data."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    raw = bytearray(path.read_bytes())
    name_len = int.from_bytes(raw[info.header_offset + 26: info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28: info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len + info.compress_size // 2
    raw[start : start + n] = bytes(b ^ 0xFF for b in raw[start : start + n])
    path.write_bytes(bytes(raw))


def test_inspect_of_a_checkpoint_with_a_damaged_model_is_a_clean_error(tmp_path: Path) -> None:
    """``inspect`` reads the routing model stored in the checkpoint (never the sums, issue
    #14): damage there is one error line and exit 2."""
    worker = _written(tmp_path)[2]
    _flip_member(worker.store.path, "engine__model.means.npy")
    result = runner.invoke(app, ["inspect", str(worker.store.path)])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "error:" in result.output and "Traceback" not in result.output


def test_damaged_sums_are_refused_on_restore_not_shown_as_state(tmp_path: Path) -> None:
    """Damage in the sums is not read by ``inspect`` (it shows the intact routing model) but
    is caught when the state is restored: the damaged file is never used as state."""
    worker = _written(tmp_path)[2]
    _flip_member(worker.store.path, "engine__n0_s.npy")
    assert runner.invoke(app, ["inspect", str(worker.store.path)]).exit_code == 0
    with pytest.raises(SnapshotFormatError):
        decode_checkpoint(worker.store.path).engine()


# --------------------------------------------------------------------------- item 7
def test_checkpoint_write_failure_keeps_running_uncommitted_then_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import service.checkpoint as checkpoint_module

    settings = small_settings(tmp_path, worker={"backoff_initial_s": 10.0})
    broker = MemoryBroker()
    fill_cohort(broker, 4000)
    disk = _Disk(checkpoint_module.atomic_write)
    monkeypatch.setattr(checkpoint_module, "atomic_write", disk)
    clock = _Clock()
    monkeypatch.setattr(worker_module, "time", clock)
    monkeypatch.setattr(checkpoint_policy_module, "time", clock)
    worker = memory_worker(settings, broker)
    failures = worker.metrics.checkpoint_failures
    worker.restore()

    def batch() -> None:
        assert worker.process_batch(worker.source.poll(250, 0.0))
        worker.broker.probe(worker.source)

    with caplog.at_level(logging.INFO, logger="streammom"):
        for _ in range(4):  # 1000 records: the first checkpoint is due and fails (disk full)
            batch()
    assert disk.attempts == 1 and failures._value.get() == 1
    assert any(r.levelno == logging.ERROR and "checkpoint" in r.getMessage()
               for r in caplog.records)
    ok, details = worker.readiness()
    assert not ok and details["checkpoint"] is False and details["broker"] is True
    assert broker.commit_log == [] and worker.last_checkpoint_offsets == {}
    assert worker.metrics.last_checkpoint._value.get() == 0
    # the loop keeps going (state advances, outputs flow) without retrying on every batch
    for _ in range(4):
        batch()
    assert worker.offsets == {(IN, 0): 2000}
    assert len(broker.records(settings.topics.assignments)) == 2000
    assert disk.attempts == 1 and broker.commit_log == []
    # after the backoff it is retried (still full: the backoff doubles)
    clock.offset += 10.5
    batch()
    assert disk.attempts == 2 and failures._value.get() == 2
    clock.offset += 10.5
    batch()
    assert disk.attempts == 2
    # space is back: the next retry writes the checkpoint, commits it and readiness returns
    disk.full = False
    clock.offset += 10.5
    batch()
    assert disk.attempts == 3 and failures._value.get() == 2
    assert worker.offsets == {(IN, 0): 2750} == worker.last_checkpoint_offsets
    assert broker.commit_log == [("streammom", {(IN, 0): 2750})]
    assert decode_checkpoint(worker.store.path).offsets == {(IN, 0): 2750}
    assert worker.metrics.last_checkpoint._value.get() > 0
    ok, details = worker.readiness()
    assert ok and details["checkpoint"] is True


def test_final_checkpoint_failure_exits_nonzero_without_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import service.checkpoint as checkpoint_module

    settings = small_settings(tmp_path)
    broker = MemoryBroker()
    fill_cohort(broker, 600)  # below every_events: only the final checkpoint is due
    disk = _Disk(checkpoint_module.atomic_write, errno.EIO)
    monkeypatch.setattr(checkpoint_module, "atomic_write", disk)
    worker = memory_worker(settings, broker)
    with caplog.at_level(logging.INFO, logger="streammom"):
        code = worker.run()
    assert code != 0 and disk.attempts == 1
    assert broker.commit_log == [] and not worker.store.path.exists()
    assert worker.source.closed and worker.sink.closed
    assert any(r.levelno == logging.ERROR and "final checkpoint" in r.getMessage()
               for r in caplog.records)


def test_startup_check_refuses_a_directory_under_a_regular_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = CheckpointStore(blocker / "sub")
    with pytest.raises(CheckpointDirError) as info:
        store.check_writable()
    assert str(blocker / "sub") in str(info.value) and "Not a directory" in str(info.value)


def test_startup_check_refuses_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CheckpointStore(tmp_path / "ckpt")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CheckpointDirError) as info:
        store.check_writable()
    monkeypatch.undo()
    assert str(store.directory) in str(info.value) and "No space left" in str(info.value)
    assert list(store.directory.iterdir()) == []  # the probe file was removed


def test_run_exits_2_before_consuming_when_the_state_dir_is_unusable(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    produce_sample(events=300, output=str(events), seed=4)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["run", "--input", str(events), "--output", str(out),
                                 "--checkpoint-dir", str(blocker / "sub"),
                                 "--set", "model.vocabulary_capacity=128"])
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    fatal = [r for r in lines if r["level"] == "error"]
    assert len(fatal) == 1 and str(blocker / "sub") in fatal[0]["error"]
    assert "Not a directory" in fatal[0]["error"]
    assert not out.exists() or out.read_text() == ""  # nothing consumed, nothing produced


# --------------------------------------------------------------------------- item 8
_KILLED_WRITER = """
import os, sys
from streammom.serialization import atomic_write_bytes
os.fsync = lambda fd: os._exit(9)  # SIGKILL-like: no cleanup, no rename
atomic_write_bytes(sys.argv[1], b"x" * 3000)
"""


def test_restore_removes_orphan_temp_files_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings, broker, first = _written(tmp_path, 1200)
    d = first.store.directory
    # a real kill inside atomic_write_bytes (after the temp file is written, before the rename)
    killed = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(first.store.path)],
                            check=False)
    assert killed.returncode == 9
    real = [p for p in d.iterdir() if p.name.startswith(".checkpoint.smm.")]
    assert len(real) == 1 and real[0].stat().st_size == 3000
    orphans = {real[0]: 3000, d / ".checkpoint.smm.k2x_9a0q.tmp": 700,
               d / ".checkpoint.prev.smm.abcd1234.tmp": 500}
    for path, size in orphans.items():
        path.write_bytes(b"\0" * size)
    keep = [d / "notes.txt", d / ".checkpoint.smm.tmp", d / ".checkpoint.smm.abc.tmp",
            d / ".model.smm.abcd1234.tmp", d / "checkpoint.smm.abcd1234.tmp",
            d / ".checkpoint.smm.abcd1234.tmp.bak"]
    for path in keep:
        path.write_text("keep me")
    subdir = d / ".checkpoint.smm.dir12345.tmp"
    subdir.mkdir()
    second = memory_worker(settings, broker)
    with caplog.at_level(logging.INFO, logger="streammom"):
        second.restore()
    assert not any(p.exists() for p in orphans)
    assert all(p.read_text() == "keep me" for p in keep) and subdir.is_dir()
    cleaned = [r for r in caplog.records if getattr(r, "bytes", None) == 4200]
    assert cleaned and cleaned[0].files == 3
    assert second.offsets == {(IN, 0): 1200}
