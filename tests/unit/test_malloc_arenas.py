"""service.malloc_arenas: the daemon caps glibc's malloc arenas at start-up."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from service.malloc_arenas import cap_malloc_arenas

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

# Eight threads allocate at once; malloc_info then lists one <heap> per arena in use.
_PROBE = """
import ctypes, sys, tempfile, threading
from service.malloc_arenas import cap_malloc_arenas
capped = cap_malloc_arenas(int(sys.argv[1]))
go = threading.Barrier(8)
def work():
    go.wait()
    keep = [bytearray(200) for _ in range(20_000)]
    go.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile(suffix=".xml") as out:
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    fp = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    libc.malloc_info(0, fp)
    libc.fclose(fp)
    heaps = open(out.name).read().count("<heap nr=")
print(capped, heaps)
"""


def _arenas(cap: int, **env: str) -> tuple[bool, int]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    out = subprocess.run([sys.executable, "-c", _PROBE, str(cap)], env=environ, check=True,
                         capture_output=True, text=True).stdout.split()
    return out[0] == "True", int(out[1])


def test_the_cap_bounds_the_arenas_that_threads_allocate_from() -> None:
    capped, heaps = _arenas(2)
    assert capped and heaps <= 2
    default, heaps_default = _arenas(0)  # the control: glibc's default, an arena a thread
    assert not default and heaps_default > 2


def test_the_environment_wins_and_bad_caps_are_refused() -> None:
    capped, heaps = _arenas(2, MALLOC_ARENA_MAX="3")
    assert not capped and heaps <= 3
    with pytest.raises(ValueError, match=">= 0"):
        cap_malloc_arenas(-1)
