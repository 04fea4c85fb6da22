"""A helper process that runs :meth:`StreamingHierarchy.refit` on a copy of the state (design §6).

A refit is 0.2–1 s of eigen-solves and EM passes: in a thread it would crawl behind the GIL
with the loop (small numpy steps hold it between calls), so it runs in a process of its own,
started once (``python -m streammom.refit_process``: a fresh interpreter, nothing forked from
a process with threads). Per refit the caller's state goes out and the refitted state comes
back as raw arrays over the process's stdin/stdout (:mod:`streammom.state_pipe`; ~20 MB each
way for a 16-leaf tree at d = 1,024, tens of milliseconds): the helper rebuilds the engine
(:meth:`~streammom.engine.StreamingHierarchy.from_archive`, validated), refits it with the
same BLAS thread count as the caller — the same arithmetic, so the same bytes as a refit in
the caller — and sends it back with the refit's duration.

The caller never blocks on the helper: :meth:`RefitProcess.ready` and
:meth:`RefitProcess.collect` look at the pipe with ``select`` (timeout 0 unless asked to wait).
Anything wrong — the helper died, sent an error, ran past ``timeout_s`` — raises
:class:`RefitProcessError` and the helper is stopped; the caller still has the state it sent
and refits it itself (:mod:`streammom.background_refits`). POSIX only (``select`` on pipes).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import gc
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from threadpoolctl import threadpool_limits

from streammom.engine import StreamingHierarchy
from streammom.serialization import SnapshotFormatError
from streammom.state_pipe import StatePipeError, read_state, write_state
from streammom.warmup import warm_up

__all__ = [
    "MAX_NICE", "PIPE_BYTES", "RefitProcess", "RefitProcessError", "RefitResult", "main",
    "widen_pipe",
]

_READY = b"R"

#: The largest niceness increment asked of the helper (POSIX niceness runs to 19).
MAX_NICE = 19


#: Bytes a state pipe buffers (Linux ``F_SETPIPE_SZ``; 1 MiB is the default
#: ``/proc/sys/fs/pipe-max-size`` an unprivileged process may ask for; the kernel's default is
#: 64 KiB). A state crosses the pipe in buffer-sized turns, each needing the other process on a
#: core: at 64 KiB a 20 MB state takes ~320 of them. On a busy 2-core machine (broker, loop,
#: producer thread, helper) reading a returned state took 27–65 ms at 64 KiB and 9–20 ms at
#: 1 MiB (``bench/daemon_defaults.py``; BENCHMARKS.md "Where the longest stall comes from").
PIPE_BYTES = 1 << 20


def widen_pipe(fd: int, size: int = PIPE_BYTES) -> int:
    """Ask the kernel for a pipe buffer of ``size`` bytes on ``fd``; the size it has (the
    kernel's rounding, or the old size where the request is refused or the platform has no
    ``F_SETPIPE_SZ``). Best effort: a smaller buffer only means more turns.

    >>> r, w = os.pipe()
    >>> widen_pipe(w, 1 << 20) >= 1 << 20 or not hasattr(fcntl, "F_SETPIPE_SZ")
    True
    >>> os.close(r); os.close(w)
    """
    if not 0 < size < 1 << 31:  # fcntl passes a C int: larger sizes would wrap around
        raise ValueError(f"a pipe size must be in 1 … 2³¹ − 1 bytes, got {size}")
    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)
    getpipe = getattr(fcntl, "F_GETPIPE_SZ", None)
    if setpipe is not None:
        try:
            return int(fcntl.fcntl(fd, setpipe, size))
        except OSError:  # above pipe-max-size or the user's pipe quota: keep what it has
            pass
    return int(fcntl.fcntl(fd, getpipe)) if getpipe is not None else 0


class RefitProcessError(RuntimeError):
    """The helper process failed a refit (died, reported an error, or timed out)."""


@dataclass(frozen=True)
class RefitResult:
    """A refitted engine and the seconds its refit took in the helper."""

    engine: StreamingHierarchy
    duration_s: float


class RefitProcess:
    """The caller's end of the helper process (see the module docstring).

    Parameters
    ----------
    blas_threads : int >= 1, default 1
        BLAS/OpenMP threads of the helper's pools, the caller's own limit. The refit itself
        runs on one BLAS thread whatever this is (``streammom.engine.REFIT_BLAS_THREADS``),
        so the helper and the caller refit alike, byte for byte.
    timeout_s : float > 0, default 600
        A refit still running after this long is abandoned (the helper is killed).
    nice : int in 0 … 19, default 0
        Niceness the helper adds to the caller's when it starts (``os.nice``): a background
        refit yields the CPU to the caller's loop when the machine is busy, and takes what the
        loop leaves otherwise. It changes when a refit ends, never what it computes.
    """

    def __init__(self, *, blas_threads: int = 1, timeout_s: float = 600.0, nice: int = 0
                 ) -> None:
        if blas_threads < 1:
            raise ValueError(f"blas_threads must be >= 1, got {blas_threads}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if not 0 <= nice <= MAX_NICE:
            raise ValueError(f"nice must be in 0 … {MAX_NICE}, got {nice}")
        self.blas_threads = int(blas_threads)
        self.nice = int(nice)
        self.timeout_s = float(timeout_s)
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._submitted_at: float | None = None
        self._events_seen = -1

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the helper if it is not running (returns at once; it imports the library and
        says it is ready on its own time, about a second later: :meth:`ready`)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        package_root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH")) if p)
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(self.blas_threads)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "streammom.refit_process", str(self.blas_threads),
             str(self.nice)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env,
            close_fds=True)
        for stream in (self._proc.stdin, self._proc.stdout):
            assert stream is not None
            widen_pipe(stream.fileno())
        self._ready = False
        self._submitted_at = None

    def close(self) -> None:
        """Stop the helper (its stdin closed, then killed if it does not exit at once)."""
        proc, self._proc = self._proc, None
        self._ready = False
        self._submitted_at = None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def ready(self) -> bool:
        """Whether the helper is up and idle (never waits; starts it if it is not running)."""
        if self._proc is None or self._proc.poll() is not None:
            self.start()
            return False
        if self._submitted_at is not None:
            return False
        if not self._ready and self._readable(0.0):
            assert self._proc.stdout is not None
            self._ready = self._proc.stdout.read(1) == _READY
            if not self._ready:
                self.close()  # it exited, or said something else: start afresh next time
        return self._ready

    def wait_ready(self, timeout: float) -> bool:
        """Start the helper if needed and wait up to ``timeout`` seconds until it is ready."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            left = deadline - time.monotonic()
            if left <= 0 or self._proc is None or self.busy:
                return False
            self._readable(min(left, 1.0))  # returns as soon as it says ready (or exits)
        return True

    @property
    def pid(self) -> int | None:
        """The helper's process id while it runs (for monitoring), else None."""
        return None if self._proc is None else self._proc.pid

    @property
    def busy(self) -> bool:
        """A refit was submitted and not collected yet."""
        return self._submitted_at is not None

    # ------------------------------------------------------------------ refits
    def submit(self, engine: StreamingHierarchy) -> None:
        """Send ``engine``'s state to the idle helper, which starts refitting it. The caller
        must not change ``engine`` until :meth:`collect` returns (or raises)."""
        if not self.ready():
            raise RefitProcessError("the refit process is not ready")
        assert self._proc is not None and self._proc.stdin is not None
        manifest, arrays = engine.to_archive()
        try:
            write_state(self._proc.stdin, manifest, arrays)  # type: ignore[arg-type]
        except (OSError, StatePipeError) as exc:
            self.close()
            raise RefitProcessError(f"could not send the state: {exc}") from exc
        self._submitted_at = time.monotonic()
        self._events_seen = int(engine.n_events_seen_)

    def collect(self, timeout: float | None = 0.0) -> RefitResult | None:
        """The refitted engine once the helper has sent it, waiting up to ``timeout`` seconds
        for it (None: until it comes or ``timeout_s`` has passed since :meth:`submit`); None
        if it is not there yet. Raises :class:`RefitProcessError` on any failure."""
        if self._submitted_at is None or self._proc is None:
            raise RefitProcessError("no refit was submitted")
        left = self.timeout_s - (time.monotonic() - self._submitted_at)
        wait = left if timeout is None else min(timeout, left)
        if not self._readable(max(wait, 0.0)):
            if time.monotonic() - self._submitted_at >= self.timeout_s:
                self.close()
                raise RefitProcessError(f"the refit took more than {self.timeout_s:g} s")
            return None
        assert self._proc.stdout is not None
        try:
            info, manifest, arrays = read_state(self._proc.stdout)  # type: ignore[arg-type]
        except (EOFError, OSError, StatePipeError) as exc:
            self.close()
            raise RefitProcessError(f"the refit process failed: {exc}") from exc
        self._submitted_at = None
        if not info.get("ok"):
            self.close()
            raise RefitProcessError(f"the refit failed in the helper: {info.get('error')}")
        try:
            engine = StreamingHierarchy.from_archive(manifest, arrays)
        except (SnapshotFormatError, ValueError, KeyError, TypeError) as exc:
            self.close()
            raise RefitProcessError(f"the refitted state is not valid: {exc}") from exc
        if engine.n_events_seen_ != self._events_seen:
            self.close()
            raise RefitProcessError("the refitted state is not the one submitted")
        duration = float(info.get("duration_s", 0.0))
        engine.last_refit_duration_ = duration
        return RefitResult(engine, duration)

    def _readable(self, timeout: float) -> bool:
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        return bool(ready)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing to clean up with
            self.close()


# ---------------------------------------------------------------------- the helper's side
def _release_memory() -> None:
    """Between refits the helper holds nothing: collect, and give the freed heap back to the
    system (glibc's ``malloc_trim``; a no-op elsewhere), so its resident memory is that of
    the interpreter and its libraries while it waits, not of the last refit's temporaries.
    With the start-up objects frozen (:func:`main`) the collection takes ~0.5 ms, not ~90."""
    gc.collect()
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).malloc_trim(0)

def main(argv: list[str] | None = None) -> int:
    """The helper's loop: say ready, then read a state, refit it, send it back, until stdin
    closes. Errors of a refit are sent back (the caller refits itself); the helper goes on."""
    args = sys.argv[1:] if argv is None else argv
    threads = int(args[0]) if args else 1
    nice = min(int(args[1]), MAX_NICE) if len(args) > 1 else 0
    if nice > 0:
        # below the loop's priority: on a busy machine the scheduler gives the loop (and the
        # broker) the CPU first, and the refit the rest (BENCHMARKS.md, issue #14)
        os.nice(nice)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        with threadpool_limits(limits=threads):
            # ready once the compiled kernels and the refit's lazy imports are loaded: left to
            # the first refit they lengthened it by ~0.45 s, and every event read meanwhile is
            # held, on the chain of growth refits a young stream runs (BENCHMARKS.md "Cheaper
            # refits, and the helper's start-up")
            warm_up()
            _release_memory()
            # the interpreter's start-up objects (numpy, scipy, numba: ~90 ms a full
            # collection, which found nothing) leave the collector's generations, so the
            # collection after every refit walks only what the refit left
            gc.freeze()
            stdout.write(_READY)
            stdout.flush()
            while True:
                try:
                    _, manifest, arrays = read_state(stdin)
                except EOFError:
                    return 0
                try:
                    engine = StreamingHierarchy.from_archive(manifest, arrays)
                    del manifest, arrays
                    t0 = time.perf_counter()
                    engine.refit(light=None)
                    info = {"ok": True, "duration_s": time.perf_counter() - t0}
                    write_state(stdout, *engine.to_archive(), info=info)
                    del engine
                except Exception as exc:  # the process boundary: the caller refits itself
                    write_state(stdout, {}, {}, info={"ok": False, "error": repr(exc)[:2000]})
                _release_memory()
    except (KeyboardInterrupt, BrokenPipeError):
        return 0


if __name__ == "__main__":
    sys.exit(main())
