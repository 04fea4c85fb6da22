"""Snapshot archives: a JSON manifest plus named numpy arrays, never pickle.

An archive is a ZIP file with one ``manifest.json`` member and one ``<name>.npy`` member per
array (the ``.npz`` layout, so ``numpy.load`` can read the arrays too). Members are written in
sorted order with a fixed timestamp and fixed compression, so the same manifest and arrays give
byte-identical archives. Reading never unpickles and trusts nothing in the file: see
:func:`read_archive` for what is bounded and checked before anything is allocated.
"""

from __future__ import annotations

import io
import json
import os
import re
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

FORMAT_NAME = "streammom"
MANIFEST_MEMBER = "manifest.json"
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)
_DEFAULT_MAX_BYTES = 4 * 1024**3
DEFAULT_MAX_BYTES = _DEFAULT_MAX_BYTES
"""Default limit on what an archive may expand to (sum of its members' uncompressed sizes).

A full engine checkpoint at the default configuration (4,096 features, 16 leaves → 31 nodes,
each with d(d+1)/2 float64 second-order sums) is about 2.1 GB uncompressed, so the limit is
not lower; pass a smaller ``max_bytes`` (``streammom inspect --max-bytes``) for files from
elsewhere.
"""


class SnapshotFormatError(ValueError):
    """Raised when an archive is not a valid streammom snapshot."""


def _dump_manifest(manifest: Mapping[str, Any]) -> bytes:
    return json.dumps(
        manifest, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True
    ).encode("ascii")


def check_manifest(
    manifest: Mapping[str, Any], *, kind: str, schema_version: int, what: str,
    also_reads: tuple[int, ...] = (),
) -> None:
    """Refuse a manifest of another ``kind`` or an unsupported ``schema_version``
    (``schema_version`` or one of the older versions in ``also_reads``).

    ``what`` names the object in the message ("hierarchy model", "engine snapshot", …).

    >>> check_manifest({"kind": "x", "schema_version": 1}, kind="x", schema_version=1, what="x")
    >>> check_manifest({"kind": "y"}, kind="x", schema_version=1, what="thing")
    Traceback (most recent call last):
    ...
    streammom.serialization.SnapshotFormatError: not a thing: kind='y'
    """
    if manifest.get("kind") != kind:
        raise SnapshotFormatError(f"not a {what}: kind={manifest.get('kind')!r}")
    if manifest.get("schema_version") not in (schema_version, *also_reads):
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
    return FrozenArchive(_dump_manifest(manifest), arrays, compresslevel).to_bytes()


def frozen_archive(
    manifest: Mapping[str, Any],
    arrays: Mapping[str, np.ndarray],
    *,
    compresslevel: int = 6,
) -> FrozenArchive:
    """:func:`archive_bytes` in two steps, for writing live state off the caller's thread:
    the manifest is serialised and every array copied now (a consistent snapshot: the caller
    may go on changing its state), and the returned :class:`FrozenArchive` writes the same
    bytes later, on any thread — to a file as they are made, or as one ``bytes``.

    >>> import numpy as np
    >>> x = np.arange(3.0); frozen = frozen_archive({"kind": "demo"}, {"x": x}); x[:] = 7.0
    >>> frozen.to_bytes() == archive_bytes({"kind": "demo"}, {"x": np.arange(3.0)})
    True
    """
    copies = {name: np.array(arr, copy=True) for name, arr in arrays.items()}
    return FrozenArchive(_dump_manifest(manifest), copies, compresslevel)


class FrozenArchive:
    """An archive's serialised manifest and its arrays (private copies when made by
    :func:`frozen_archive`), written on demand.

    :meth:`write` streams the archive into a file member by member, so writing a checkpoint
    holds the copies and one array's ``.npy`` bytes at a time, not the whole archive as well
    (:meth:`to_bytes` builds it in memory, for callers that need the bytes).
    """

    def __init__(self, manifest_text: bytes, arrays: Mapping[str, np.ndarray],
                 compresslevel: int) -> None:
        self._manifest_text = manifest_text
        self._arrays = arrays
        self._compresslevel = compresslevel

    def write(self, fp: IO[bytes]) -> None:
        """Write the archive to the seekable binary file ``fp`` (from its current position)."""
        _write_zip(fp, self._manifest_text, self._arrays, self._compresslevel)

    def to_bytes(self) -> bytes:
        """The archive's bytes (what :meth:`write` writes)."""
        buf = io.BytesIO()
        self.write(buf)
        return buf.getvalue()


def _write_zip(fp: IO[bytes], manifest_text: bytes | str, arrays: Mapping[str, np.ndarray],
               compresslevel: int) -> None:
    """The archive's members, in sorted order with fixed dates, into ``fp``; one array's
    ``.npy`` bytes are in memory at a time."""
    if MANIFEST_MEMBER[:-5] in arrays:
        raise SnapshotFormatError("array name 'manifest' is reserved")
    with zipfile.ZipFile(fp, "w") as zf:
        info = zipfile.ZipInfo(MANIFEST_MEMBER, date_time=_FIXED_DATE)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        zf.writestr(info, manifest_text, compresslevel=compresslevel)
        for name in sorted(arrays):
            arr = np.asarray(arrays[name])
            if arr.dtype.hasobject:
                raise SnapshotFormatError(f"array {name!r} has dtype object; refusing to pickle")
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with member.getbuffer() as npy:  # no copy of the member's bytes
                zf.writestr(info, npy, compresslevel=compresslevel)  # type: ignore[arg-type]


def read_archive(
    source: bytes | str | os.PathLike[str],
    *,
    max_bytes: int = _DEFAULT_MAX_BYTES,
    select: Callable[[str], bool] | None = None,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read an archive written by :func:`archive_bytes` (bytes or a path).

    ``select(name)`` chooses the arrays to read (default: all); the others are neither
    inflated nor counted against ``max_bytes`` (every member's ZIP entry is still checked), and
    a file is read member by member, so a selective read costs what it selects.

    Archives are data from outside, so nothing is trusted before it is checked:

    * the declared uncompressed sizes add up to at most ``max_bytes`` (default
      :data:`DEFAULT_MAX_BYTES`), member names are plain ``<name>.npy`` (no paths, no
      duplicates), members are stored or deflated (never bzip2/lzma, whose small reads can
      inflate without bound) and not encrypted;
    * ``manifest.json`` is at most 16 MiB, at most 64 levels deep, and holds only finite
      numbers (no NaN, Infinity, 1e999 or integers beyond Python's 4,300 digits);
    * every array's ``.npy`` header (v1.0/2.0, at most 64 KiB) is parsed first: a plain
      numeric dtype (never object, so never pickle), and a shape whose byte size is exactly
      the member's declared size — so a header announcing a huge shape allocates nothing;
    * array data is inflated in bounded chunks up to that declared size and no further, so a
      member whose ZIP sizes lie ends in an error (short read or CRC mismatch), not in
      unbounded memory.

    Reading therefore costs at most the file, the declared sizes (≤ ``max_bytes``) and one
    1 MiB chunk, whatever the file says; a file much larger than ``max_bytes`` (a ZIP is
    never much larger than its content) is refused before it is read. Compression ratios are
    not limited: legitimate moment sums can be almost all zeros (≈ 1000:1 with deflate).

    Any failure — bad ZIP structure, CRC or deflate errors, truncation — raises
    :class:`SnapshotFormatError` with a one-line reason (naming the member when there is
    one); a path that cannot be opened raises :class:`OSError`.
    """
    if not isinstance(source, bytes):
        path = Path(source)
        if path.is_dir():
            raise SnapshotFormatError(f"{source} is a directory, not a snapshot")
        size = path.stat().st_size
        if size > max_bytes + max_bytes // 64 + (1 << 20):
            raise SnapshotFormatError(f"file is {size} bytes > limit {max_bytes}")
    try:
        handle = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")  # noqa: SIM115
    except IsADirectoryError as exc:
        raise SnapshotFormatError(f"{source} is a directory, not a snapshot") from exc
    try:
        with handle, zipfile.ZipFile(handle) as zf:
            return _read_members(zf, max_bytes, select)
    except SnapshotFormatError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError,
            NotImplementedError, OverflowError, RecursionError, KeyError) as exc:
        raise SnapshotFormatError(f"not a snapshot archive: {exc}") from exc


_MAX_MANIFEST_BYTES = 16 * 1024**2
_MAX_MANIFEST_DEPTH = 64
_MAX_NPY_HEADER = 64 * 1024
_MAX_NDIM = 32
_CHUNK = 1 << 20
_JSON_NESTING = re.compile(rb'[\[\]{}]|"(?:[^"\\]|\\.)*"')


def _read_members(
    zf: zipfile.ZipFile, max_bytes: int, select: Callable[[str], bool] | None = None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    infos = zf.infolist()
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise SnapshotFormatError("archive has duplicate members")
    for info in infos:
        _check_entry(info)
        name = info.filename
        if name != MANIFEST_MEMBER and (not name.endswith(".npy") or "/" in name
                                        or "\\" in name or name.startswith(".")):
            raise SnapshotFormatError(f"unexpected archive member {name!r}")
    if select is not None:
        infos = [i for i in infos
                 if i.filename == MANIFEST_MEMBER or select(i.filename.removesuffix(".npy"))]
    total = sum(i.file_size for i in infos)
    if total > max_bytes:
        raise SnapshotFormatError(f"archive expands to {total} bytes > limit {max_bytes}")
    if MANIFEST_MEMBER not in names:
        raise SnapshotFormatError("archive has no manifest.json")
    manifest = _read_manifest(zf, zf.getinfo(MANIFEST_MEMBER))
    arrays: dict[str, np.ndarray] = {}
    for info in infos:
        name = info.filename
        if name == MANIFEST_MEMBER:
            continue
        arrays[name[:-4]] = _read_array(zf, info)
    return manifest, arrays


def _check_entry(info: zipfile.ZipInfo) -> None:
    """Refuse what :func:`archive_bytes` never writes, before zipfile acts on it: another
    compression than stored/deflate (bzip2 and lzma inflate a small read without bound, others
    are unsupported), an encrypted entry, a stored entry whose two sizes differ."""
    name = info.filename
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise SnapshotFormatError(
            f"member {name!r}: unsupported compression method {info.compress_type}"
        )
    if info.flag_bits & 0x1:
        raise SnapshotFormatError(f"member {name!r} is encrypted")
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise SnapshotFormatError(
            f"member {name!r} is stored but declares {info.compress_size} stored and "
            f"{info.file_size} uncompressed bytes"
        )


def _finite_float(text: str) -> float:
    value = float(text)
    if not np.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _read_manifest(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> dict[str, Any]:
    if info.file_size > _MAX_MANIFEST_BYTES:
        raise SnapshotFormatError(f"manifest is {info.file_size} bytes > {_MAX_MANIFEST_BYTES}")
    with zf.open(info) as fh:
        text = fh.read(_MAX_MANIFEST_BYTES + 1)
    if len(text) > _MAX_MANIFEST_BYTES:
        raise SnapshotFormatError("manifest is larger than it declares")
    depth = 0
    for token in _JSON_NESTING.finditer(text):  # strings are skipped whole
        tok = token.group()
        if tok in (b"[", b"{"):
            depth += 1
            if depth > _MAX_MANIFEST_DEPTH:
                raise SnapshotFormatError(f"manifest nests deeper than {_MAX_MANIFEST_DEPTH}")
        elif tok in (b"]", b"}"):
            depth -= 1
    try:  # ValueError: bad UTF-8, bad JSON, NaN/Infinity, 1e999, an integer of > 4300 digits
        manifest = json.loads(text.decode("utf-8"), parse_float=_finite_float,
                              parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise SnapshotFormatError(f"manifest is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict):
        raise SnapshotFormatError("manifest must be a JSON object")
    return manifest


class _HeaderReader:
    """Reads at most ``limit`` bytes of a member: a ``.npy`` header (numpy writes < 200 bytes)
    announcing a length of up to 4 GiB is refused instead of being read."""

    def __init__(self, fh: IO[bytes], name: str, limit: int = _MAX_NPY_HEADER) -> None:
        self._fh, self._name, self._left = fh, name, limit

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > self._left:
            raise SnapshotFormatError(f"bad array member {self._name!r}: .npy header too long")
        self._left -= n
        return self._fh.read(n)


def _read_array(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    name = info.filename
    try:
        return _inflate_array(zf, info)
    except SnapshotFormatError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
            ValueError, OSError) as exc:  # CRC or deflate errors, bad local header …
        raise SnapshotFormatError(f"bad array member {name!r}: {exc}") from exc


def _inflate_array(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    name = info.filename
    with zf.open(info) as fh:
        header_fh = _HeaderReader(fh, name)
        try:
            version = np.lib.format.read_magic(header_fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(header_fh)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(header_fh)
            else:
                raise SnapshotFormatError(f"array {name!r}: unsupported .npy version {version}")
        except SnapshotFormatError:
            raise
        except Exception as exc:  # numpy parses the header dict with ast (SyntaxError, …)
            raise SnapshotFormatError(f"bad array member {name!r}: {exc}") from exc
        if len(shape) > _MAX_NDIM:
            raise SnapshotFormatError(f"array {name!r} has {len(shape)} dimensions")
        if dtype.hasobject or dtype.kind not in "biufc" or dtype.fields is not None:
            raise SnapshotFormatError(f"bad array member {name!r}: unsupported dtype {dtype}")
        count = 1
        for dim in shape:
            if not isinstance(dim, int) or dim < 0:
                raise SnapshotFormatError(f"array {name!r} has a bad shape {shape}")
            count *= dim
        nbytes = count * dtype.itemsize
        header = fh.tell()
        if header + nbytes != info.file_size:
            raise SnapshotFormatError(
                f"array {name!r}: shape {shape} needs {nbytes} bytes, the member declares "
                f"{info.file_size - header}"
            )
        data = bytearray(nbytes)
        view = memoryview(data)
        got = 0
        while got < nbytes:
            n = fh.readinto(view[got : got + _CHUNK])
            if not n:
                raise SnapshotFormatError(f"array {name!r} is truncated")
            got += n
        if fh.read(1):
            raise SnapshotFormatError(f"array {name!r} is longer than it declares")
    arr = np.frombuffer(data, dtype=dtype)
    order = "F" if fortran else "C"
    return arr.reshape(shape, order=order) if shape else arr.reshape(())


_TMP_SUFFIX = ".tmp"
_TMP_RANDOM_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")  # tempfile.mkstemp's
_TMP_RANDOM_LEN = 8


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`atomic_write`)."""
    atomic_write(path, lambda fh: fh.write(data))


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object]) -> int:
    """Write ``path`` atomically with ``write(fh)``: temp file, fsync, rename, fsync of the
    directory; the bytes written.

    The temp file is ``.<name>.<8 random chars>.tmp`` next to ``path``; it is removed on any
    error, but a process killed between its creation and the rename leaves it behind — see
    :func:`atomic_temp_files` to find such leftovers. Errors (``ENOSPC``, ``EACCES``, ``EIO``
    …) are raised as :class:`OSError`; one raised before the rename leaves ``path`` with its
    previous content (only the final fsync of the directory comes after the rename).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=_TMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            size = fh.tell()
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
    return size


def atomic_temp_files(path: str | os.PathLike[str]) -> list[Path]:
    """The temp files :func:`atomic_write_bytes` left next to ``path`` when it was killed.

    Only regular files (not symlinks, not directories) in ``path``'s directory whose name has
    the exact form ``.<name>.<8 chars of [a-z0-9_]>.tmp`` are returned; a missing directory
    gives ``[]``. Only call this when no writer of ``path`` can be running (at start-up).
    """
    target = Path(path)
    prefix = f".{target.name}."
    try:
        entries = list(os.scandir(target.parent))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(_TMP_SUFFIX)):
            continue
        middle = name[len(prefix) : -len(_TMP_SUFFIX)]
        if (len(middle) == _TMP_RANDOM_LEN and set(middle) <= _TMP_RANDOM_CHARS
                and entry.is_file(follow_symlinks=False)):
            found.append(Path(entry.path))
    return sorted(found)
