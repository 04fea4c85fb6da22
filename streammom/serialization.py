"""Snapshot archives: a JSON manifest plus named numpy arrays, never pickle.

An archive is a ZIP file with one ``manifest.json`` member and one ``<name>.npy`` member per
array (the ``.npz`` layout, so ``numpy.load`` can read the arrays too). Members are written in
sorted order with a fixed timestamp and fixed compression, so the same manifest and arrays give
byte-identical archives. Arrays are read with ``allow_pickle=False``; object arrays are refused.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_NAME = "streammom"
MANIFEST_MEMBER = "manifest.json"
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)
_DEFAULT_MAX_BYTES = 4 * 1024**3


class SnapshotFormatError(ValueError):
    """Raised when an archive is not a valid streammom snapshot."""


def _dump_manifest(manifest: Mapping[str, Any]) -> bytes:
    return json.dumps(
        manifest, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True
    ).encode("ascii")


def check_manifest(
    manifest: Mapping[str, Any], *, kind: str, schema_version: int, what: str
) -> None:
    """Refuse a manifest of another ``kind`` or an unsupported ``schema_version``.

    ``what`` names the object in the message ("hierarchy model", "engine snapshot", …).

    >>> check_manifest({"kind": "x", "schema_version": 1}, kind="x", schema_version=1, what="x")
    >>> check_manifest({"kind": "y"}, kind="x", schema_version=1, what="thing")
    Traceback (most recent call last):
    ...
    streammom.serialization.SnapshotFormatError: not a thing: kind='y'
    """
    if manifest.get("kind") != kind:
        raise SnapshotFormatError(f"not a {what}: kind={manifest.get('kind')!r}")
    if manifest.get("schema_version") != schema_version:
        raise SnapshotFormatError(
            f"unsupported {what} schema version {manifest.get('schema_version')!r}"
        )


def archive_bytes(
    manifest: Mapping[str, Any],
    arrays: Mapping[str, np.ndarray],
    *,
    compresslevel: int = 6,
) -> bytes:
    """Serialise ``manifest`` and ``arrays`` to deterministic archive bytes.

    >>> import numpy as np
    >>> a = archive_bytes({"kind": "demo"}, {"x": np.arange(3.0)})
    >>> a == archive_bytes({"kind": "demo"}, {"x": np.arange(3.0)})
    True
    >>> m, arrs = read_archive(a)
    >>> m["kind"], arrs["x"].tolist()
    ('demo', [0.0, 1.0, 2.0])
    """
    if MANIFEST_MEMBER[:-5] in arrays:
        raise SnapshotFormatError("array name 'manifest' is reserved")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo(MANIFEST_MEMBER, date_time=_FIXED_DATE)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        zf.writestr(info, _dump_manifest(manifest), compresslevel=compresslevel)
        for name in sorted(arrays):
            arr = np.asarray(arrays[name])
            if arr.dtype.hasobject:
                raise SnapshotFormatError(f"array {name!r} has dtype object; refusing to pickle")
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, member.getvalue(), compresslevel=compresslevel)
    return buf.getvalue()


def read_archive(
    source: bytes | str | os.PathLike[str], *, max_bytes: int = _DEFAULT_MAX_BYTES
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read an archive written by :func:`archive_bytes` (bytes or a path).

    Validates member names and the total uncompressed size (``max_bytes``) before reading,
    and never unpickles.
    """
    raw = source if isinstance(source, bytes) else Path(source).read_bytes()
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except zipfile.BadZipFile as exc:
        raise SnapshotFormatError(f"not a snapshot archive: {exc}") from exc
    with zf:
        infos = zf.infolist()
        total = sum(i.file_size for i in infos)
        if total > max_bytes:
            raise SnapshotFormatError(f"archive expands to {total} bytes > limit {max_bytes}")
        names = [i.filename for i in infos]
        if MANIFEST_MEMBER not in names:
            raise SnapshotFormatError("archive has no manifest.json")
        try:
            manifest = json.loads(zf.read(MANIFEST_MEMBER).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SnapshotFormatError(f"manifest is not valid JSON: {exc}") from exc
        if not isinstance(manifest, dict):
            raise SnapshotFormatError("manifest must be a JSON object")
        arrays: dict[str, np.ndarray] = {}
        for name in names:
            if name == MANIFEST_MEMBER:
                continue
            if not name.endswith(".npy") or "/" in name or name.startswith("."):
                raise SnapshotFormatError(f"unexpected archive member {name!r}")
            try:
                arrays[name[:-4]] = np.lib.format.read_array(
                    io.BytesIO(zf.read(name)), allow_pickle=False
                )
            except ValueError as exc:
                raise SnapshotFormatError(f"bad array member {name!r}: {exc}") from exc
    return manifest, arrays


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file, fsync, rename, fsync of the directory."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
