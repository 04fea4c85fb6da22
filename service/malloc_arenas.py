"""Cap the C allocator's arenas in the daemon's process (glibc ``mallopt(M_ARENA_MAX, n)``).

glibc gives a thread that allocates while another holds the main arena an arena of its own, up
to 8 per core. The daemon has several threads that allocate — the Kafka client's IO thread, the
producer's sender, the checkpoint writer, the HTTP server — and memory freed in one arena is
not reused by the others: on the 200,000-event stream of ``bench/daemon_defaults.py``, with
50,000 held events and checkpoints built in memory, the daemon's peak RSS was 524–538 MB with
glibc's default and 461 MB with two arenas, at the same throughput; at today's defaults the
difference is within the noise (BENCHMARKS.md, "The daemon's memory, helper included"). The
limit is computed by glibc once, when the first extra arena is made, so it is set at start-up,
before the Kafka clients start their threads. ``MALLOC_ARENA_MAX`` in the environment wins
(glibc has read it already); on other C libraries this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["M_ARENA_MAX", "cap_malloc_arenas"]

#: glibc's ``M_ARENA_MAX`` parameter of ``mallopt`` (``malloc.h``).
M_ARENA_MAX = -8


def cap_malloc_arenas(arenas: int) -> bool:
    """At most ``arenas`` malloc arenas in this process (0: leave the C library's default);
    True if the cap was set here, False when the environment sets it, ``arenas`` is 0 or the
    C library has no ``mallopt``.

    >>> cap_malloc_arenas(0)
    False
    """
    if arenas < 0:
        raise ValueError(f"the malloc arena cap must be >= 0 (0: the default), got {arenas}")
    if arenas == 0 or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
