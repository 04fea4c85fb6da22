"""Crafted snapshot files (issue #12, item 10): ZIP sizes that lie, ``.npy`` headers announcing
huge shapes, a manifest nested beyond reason, trees with cycles. ``read_archive`` and the model
loaders refuse each quickly and in bounded memory, and ``streammom inspect`` answers one
``error:`` line with exit status 2, never a traceback or a hang."""

from __future__ import annotations

import io
import json
import struct
import time
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from service.cli import app
from streammom import StreamingHierarchy
from streammom.datasets import make_hierarchical_bernoulli
from streammom.model import HierarchyModel
from streammom.serialization import SnapshotFormatError, archive_bytes, read_archive

runner = CliRunner()


def _npy_header(shape: tuple[int, ...], dtype: str = "<f8") -> bytes:
    buf = io.BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _lie_about_size(raw: bytes, member: str, size: int) -> bytes:
    """Rewrite ``member``'s uncompressed size in its local header and central directory."""
    out = bytearray(raw)
    name = member.encode()
    local = out.find(b"PK\x03\x04" + b"")
    while local >= 0:
        n = struct.unpack_from("<H", out, local + 26)[0]
        if out[local + 30 : local + 30 + n] == name:
            struct.pack_into("<I", out, local + 22, size)
        local = out.find(b"PK\x03\x04", local + 4)
    central = out.find(b"PK\x01\x02")
    while central >= 0:
        n = struct.unpack_from("<H", out, central + 28)[0]
        if out[central + 46 : central + 46 + n] == name:
            struct.pack_into("<I", out, central + 24, size)
        central = out.find(b"PK\x01\x02", central + 4)
    return bytes(out)


def _refused_quickly(raw: bytes, match: str) -> None:
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(SnapshotFormatError, match=match):
            read_archive(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 30
    assert peak < 32 * 1024**2, f"peak {peak / 1024**2:.0f} MiB"


def test_a_member_inflating_past_its_declared_size_is_refused_in_bounded_memory() -> None:
    header = _npy_header((8,))
    bomb = header + bytes(200 * 1024**2)  # deflates ~1000:1
    raw = _zip({"manifest.json": b"{}", "x.npy": bomb})
    assert len(raw) < 1024**2
    lying = _lie_about_size(raw, "x.npy", len(header) + 64)
    _refused_quickly(lying, "CRC|longer|not a snapshot")


def test_a_huge_shape_is_refused_before_allocating() -> None:
    raw = _zip({"manifest.json": b"{}", "x.npy": _npy_header((10**12,)) + bytes(64)})
    _refused_quickly(raw, "needs 8000000000000 bytes")


def test_a_declared_size_beyond_the_limit_is_refused_before_reading() -> None:
    raw = _zip({"manifest.json": b"{}", "x.npy": _npy_header((8,)) + bytes(64)})
    lying = _lie_about_size(raw, "x.npy", 2**32 - 1)
    with pytest.raises(SnapshotFormatError, match="limit"):
        read_archive(lying, max_bytes=2**31)


def test_a_deeply_nested_manifest_is_refused() -> None:
    raw = _zip({"manifest.json": b"[" * 200_000 + b"]" * 200_000})
    _refused_quickly(raw, "nests deeper")


def test_strings_do_not_count_as_nesting() -> None:
    manifest = {"kind": "demo", "text": "[" * 1000}
    assert read_archive(archive_bytes(manifest, {}))[0] == manifest


def test_flipped_and_truncated_bytes_are_format_errors() -> None:
    raw = archive_bytes({"kind": "demo"}, {"x": np.arange(10_000.0)})
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0xFF
    for bad in (bytes(flipped), raw[: len(raw) // 2], raw[:40]):
        with pytest.raises(SnapshotFormatError):
            read_archive(bad)


# ------------------------------------------------------------------ trees from outside
@pytest.fixture(scope="module")
def engine() -> StreamingHierarchy:
    X, *_ = make_hierarchical_bernoulli(3000, 200, n_leaves=4, random_state=0)
    eng = StreamingHierarchy(n_features=200, max_depth=2, refit_every=1000,
                             min_split_weight=50.0, random_state=0)
    for start in range(0, 3000, 500):
        eng.learn(X[start : start + 500])
    eng.refit()
    assert len(eng.model_.nodes) >= 3
    return eng


def _model_with(engine: StreamingHierarchy, edit: Any) -> bytes:
    manifest, arrays = engine.model_.to_archive()
    manifest = json.loads(json.dumps(manifest))
    edit(manifest["nodes"])
    return archive_bytes(manifest, arrays)


def _root_is_its_own_child(nodes: list[dict[str, Any]]) -> None:
    root = next(n for n in nodes if n["parent"] < 0)
    root["parent"] = root["id"]
    root["children"] = [root["id"], *root["children"][1:]]


def _two_cycle(nodes: list[dict[str, Any]]) -> None:
    root = next(n for n in nodes if n["parent"] < 0)
    child = next(n for n in nodes if n["id"] == root["children"][0])
    root["parent"] = child["id"]
    child["children"] = [root["id"], *child["children"][1:]] if child["children"] else child[
        "children"]


def _detached(nodes: list[dict[str, Any]]) -> None:
    root = next(n for n in nodes if n["parent"] < 0)
    leaf = next(n for n in nodes if n["id"] == root["children"][1])
    root["children"] = [root["children"][0], root["children"][0]]
    leaf["parent"] = root["children"][0]


@pytest.mark.parametrize("edit", [_root_is_its_own_child, _two_cycle, _detached])
def test_a_tree_that_is_not_a_tree_is_refused(
    engine: StreamingHierarchy, edit: Any, tmp_path: Path
) -> None:
    raw = _model_with(engine, edit)
    with pytest.raises(SnapshotFormatError):
        HierarchyModel.from_bytes(raw)
    path = tmp_path / "model.smm"
    path.write_bytes(raw)
    _inspect_fails_cleanly(path)


def test_an_engine_snapshot_with_a_cycle_is_refused(engine: StreamingHierarchy) -> None:
    manifest, arrays = engine.to_archive()
    manifest = json.loads(json.dumps(manifest))
    root_id = manifest["state"]["root_id"]
    root = next(n for n in manifest["nodes"] if n["id"] == root_id)
    root["children"] = [root_id, *root["children"][1:]]
    with pytest.raises(SnapshotFormatError, match=r"linked back|cycle"):
        StreamingHierarchy.from_archive(manifest, arrays)


# ------------------------------------------------------------------ the offline tools
def _inspect_fails_cleanly(path: Path) -> None:
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output


@pytest.mark.parametrize("case", ["bomb", "shape", "deep", "garbage"])
def test_inspect_answers_error_and_exit_2(case: str, tmp_path: Path) -> None:
    header = _npy_header((8,))
    files = {
        "bomb": lambda: _lie_about_size(
            _zip({"manifest.json": b"{}", "x.npy": header + bytes(50 * 1024**2)}),
            "x.npy", len(header) + 64),
        "shape": lambda: _zip({"manifest.json": b"{}",
                               "x.npy": _npy_header((10**12,)) + bytes(64)}),
        "deep": lambda: _zip({"manifest.json": b"[" * 100_000}),
        "garbage": lambda: b"PK\x03\x04" + bytes(100),
    }
    path = tmp_path / "snap.smm"
    path.write_bytes(files[case]())
    _inspect_fails_cleanly(path)
