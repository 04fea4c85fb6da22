"""A small pool of reusable packed-C buffers for the refits (engine internals).

A refit assembles full second-moment sums (d(d+1)/2 float64 each, 16 MB at d = 2,000) for the
nodes it recomputes and allocates the C of every new child. Fresh allocations of that size are
page-faulted in on first touch, which costs several times the copy itself; buffers released by
one refit (temporaries, removed nodes) are kept here, up to ``capacity``, and reused.
"""

from __future__ import annotations

import numpy as np


class PackedBufferPool:
    """At most ``capacity`` float64 arrays of ``size`` entries, handed out and taken back.

    >>> pool = PackedBufferPool(3, capacity=1)
    >>> a = pool.copy_of(np.array([1.0, 2.0, 3.0]))
    >>> pool.release(a)
    >>> b = pool.zeros()
    >>> b is a, b.tolist()
    (True, [0.0, 0.0, 0.0])
    """

    def __init__(self, size: int, *, capacity: int = 4) -> None:
        self.size = int(size)
        self.capacity = int(capacity)
        self._free: list[np.ndarray] = []

    def _take(self) -> np.ndarray | None:
        return self._free.pop() if self._free else None

    def copy_of(self, src: np.ndarray) -> np.ndarray:
        """A buffer holding a copy of ``src`` (shape (size,))."""
        buf = self._take()
        if buf is None:
            return src.copy()
        np.copyto(buf, src)
        return buf

    def zeros(self) -> np.ndarray:
        """A zero-filled buffer."""
        buf = self._take()
        if buf is None:
            return np.zeros(self.size)
        buf.fill(0.0)
        return buf

    def release(self, buf: np.ndarray | None) -> None:
        """Give a buffer back (ignored when the pool is full or the shape does not fit)."""
        if (buf is not None and len(self._free) < self.capacity and buf.shape == (self.size,)
                and buf.dtype == np.float64 and buf.flags.c_contiguous and buf.flags.writeable
                and all(buf is not b for b in self._free)):
            self._free.append(buf)
