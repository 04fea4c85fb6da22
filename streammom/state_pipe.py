"""An engine archive over a pipe: a JSON header, then the arrays' raw bytes (design §6).

The snapshot format (:mod:`streammom.serialization`) is a zip with checksums, deflated: right
for files that outlive the process, too slow to hand 20 MB of state to a helper process and
back at every refit (40–70 ms to write it even stored, against ~10 ms for the bytes alone).
Between the daemon and its refit process (:mod:`streammom.refit_process`) the same
``(manifest, arrays)`` pair travels as::

    8 bytes   little-endian length H of the header
    H bytes   JSON {"info": {...}, "manifest": {...}, "arrays": [[name, dtype, shape], ...]}
    ...       every array's bytes, C order, in the header's order

Nothing is pickled; a reader checks every dtype (numbers and booleans only) and shape before it
allocates, and the engine validates the manifest against the arrays as it would a file
(:func:`streammom.engine_archive.engine_from_archive`).

>>> import io, numpy as np
>>> buf = io.BytesIO()
>>> write_state(buf, {"kind": "demo"}, {"x": np.arange(3.0)}, info={"ok": True})
>>> _ = buf.seek(0)
>>> info, manifest, arrays = read_state(buf)
>>> info, manifest, arrays["x"].tolist()
({'ok': True}, {'kind': 'demo'}, [0.0, 1.0, 2.0])
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any, BinaryIO

import numpy as np

__all__ = ["StatePipeError", "read_state", "write_state"]

_LENGTH = struct.Struct("<Q")
#: Header bytes accepted at most (the manifest of a large engine is well under a megabyte).
MAX_HEADER_BYTES = 64 << 20
#: Array bytes accepted at most in one message.
MAX_ARRAY_BYTES = 16 << 30
_KINDS = frozenset("biuf")  # booleans, signed and unsigned integers, floats


class StatePipeError(ValueError):
    """The other end sent something that is not a state message (or closed mid-way)."""


def write_state(out: BinaryIO, manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                *, info: Mapping[str, Any] | None = None) -> None:
    """Write one message to ``out`` (a raw or buffered binary stream) and flush it."""
    blobs = [np.ascontiguousarray(a) for a in arrays.values()]
    header = json.dumps({
        "info": dict(info or {}),
        "manifest": manifest,
        "arrays": [[name, a.dtype.str, list(a.shape)] for name, a in zip(arrays, blobs,
                                                                          strict=True)],
    }, separators=(",", ":"), allow_nan=False).encode()
    _write_all(out, _LENGTH.pack(len(header)))
    _write_all(out, header)
    for a in blobs:
        if a.nbytes:
            _write_all(out, memoryview(a).cast("B"))
    out.flush()


def read_state(src: BinaryIO) -> tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray]]:
    """Read one message: ``(info, manifest, arrays)``. :class:`EOFError` when ``src`` is at its
    end before the message starts; :class:`StatePipeError` for anything malformed."""
    head = _read_exact(src, _LENGTH.size, at_start=True)
    (size,) = _LENGTH.unpack(head)
    if size > MAX_HEADER_BYTES:
        raise StatePipeError(f"state header of {size} bytes (at most {MAX_HEADER_BYTES})")
    try:
        header = json.loads(_read_exact(src, size))
        info, manifest, specs = header["info"], header["manifest"], header["arrays"]
        if not (isinstance(info, dict) and isinstance(manifest, dict)
                and isinstance(specs, list)):
            raise TypeError("info, manifest and arrays must be an object, an object, a list")
        shapes = [(str(name), _dtype(dt), tuple(int(n) for n in shape))
                  for name, dt, shape in specs]
    except (ValueError, TypeError, KeyError) as exc:
        raise StatePipeError(f"malformed state header: {exc}") from None
    total = 0
    for _, dt, shape in shapes:
        if any(n < 0 for n in shape):
            raise StatePipeError(f"negative array shape {shape}")
        total += dt.itemsize * math.prod(shape)
    if total > MAX_ARRAY_BYTES:
        raise StatePipeError(f"state arrays of {total} bytes (at most {MAX_ARRAY_BYTES})")
    arrays: dict[str, np.ndarray] = {}
    for name, dt, shape in shapes:
        arr = np.empty(shape, dtype=dt)
        if arr.nbytes:
            _read_into(src, memoryview(arr).cast("B"))
        arrays[name] = arr
    return info, manifest, arrays


def _dtype(text: Any) -> np.dtype:
    dt = np.dtype(str(text))
    if dt.kind not in _KINDS or dt.hasobject or dt.fields is not None:
        raise ValueError(f"array dtype {text!r} is not a plain number type")
    return dt


def _write_all(out: BinaryIO, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view.nbytes:
        n = out.write(view)
        if n is None:  # a non-blocking raw stream that could not take anything
            raise StatePipeError("the pipe does not accept data")
        view = view[n:]


def _read_into(src: BinaryIO, view: memoryview, *, at_start: bool = False) -> None:
    """Fill ``view`` from ``src``: :class:`EOFError` if ``src`` ends before the first byte of
    a message (``at_start``), :class:`StatePipeError` if it ends inside one."""
    got = 0
    while got < view.nbytes:
        n = src.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            if at_start and got == 0:
                raise EOFError("the pipe is closed")
            raise StatePipeError("the pipe closed in the middle of a state message")
        got += n


def _read_exact(src: BinaryIO, size: int, *, at_start: bool = False) -> bytes:
    buf = bytearray(size)
    _read_into(src, memoryview(buf), at_start=at_start)
    return bytes(buf)
