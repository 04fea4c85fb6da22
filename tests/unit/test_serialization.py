"""Snapshot archives: deterministic bytes, strict reading, atomic writes."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from streammom.serialization import (
    SnapshotFormatError,
    archive_bytes,
    atomic_write_bytes,
    read_archive,
)


def test_round_trip_preserves_manifest_and_arrays_exactly() -> None:
    rng = np.random.default_rng(0)
    arrays = {"a": rng.normal(size=(5, 3)), "b": np.arange(7, dtype=np.int64), "c": np.zeros(0)}
    manifest = {"kind": "x", "nested": {"k": [1, 2.5, None]}}
    m, out = read_archive(archive_bytes(manifest, arrays))
    assert m == manifest
    assert set(out) == set(arrays)
    for name, arr in arrays.items():
        assert out[name].dtype == arr.dtype
        np.testing.assert_array_equal(out[name], arr)


def test_bytes_do_not_depend_on_insertion_order_or_time() -> None:
    a = {"x": np.ones(3), "y": np.arange(4)}
    b = {"y": np.arange(4), "x": np.ones(3)}
    assert archive_bytes({"p": 1, "q": 2}, a) == archive_bytes({"q": 2, "p": 1}, b)


def test_object_arrays_are_refused_on_write() -> None:
    with pytest.raises(SnapshotFormatError, match="pickle"):
        archive_bytes({}, {"bad": np.array([{"a": 1}], dtype=object)})


def _zip_with(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_pickled_array_member_is_rejected_on_read() -> None:
    member = io.BytesIO()
    np.save(member, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    raw = _zip_with({"manifest.json": b"{}", "bad.npy": member.getvalue()})
    with pytest.raises(SnapshotFormatError, match="bad array member"):
        read_archive(raw)


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"x.npy": b""}, "no manifest"),
        ({"manifest.json": b"[1, 2]"}, "JSON object"),
        ({"manifest.json": b"{not json"}, "not valid JSON"),
        ({"manifest.json": b"{}", "../escape.npy": b""}, "unexpected archive member"),
        ({"manifest.json": b"{}", "notes.txt": b"hi"}, "unexpected archive member"),
    ],
)
def test_malformed_archives_get_clear_errors(members: dict[str, bytes], message: str) -> None:
    with pytest.raises(SnapshotFormatError, match=message):
        read_archive(_zip_with(members))


def test_not_a_zip_and_size_limit() -> None:
    with pytest.raises(SnapshotFormatError, match="not a snapshot"):
        read_archive(b"definitely not a zip")
    raw = archive_bytes({}, {"big": np.zeros(1000)})
    with pytest.raises(SnapshotFormatError, match="limit"):
        read_archive(raw, max_bytes=100)


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path) -> None:
    target = tmp_path / "sub" / "state.bin"
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["state.bin"]
