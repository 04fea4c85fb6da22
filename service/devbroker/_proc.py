"""Process plumbing for the dev broker: spawn a JVM that can never outlive us, stop it, find ports.

Why a dedicated spawner thread: ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the
child exits, not when the process does (prctl(2)). A broker started from a short-lived thread
(a ``threading.Timer`` in an outage test, say) would be SIGKILLed as soon as that thread ended.
All forks therefore happen on one daemon thread that lives exactly as long as the interpreter.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

_PR_SET_PDEATHSIG = 1
_libc_prctl: Any = None
with contextlib.suppress(OSError, AttributeError):  # non-glibc/non-Linux: no prctl, no-op below
    _libc_prctl = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """Build a ``preexec_fn`` that makes the child get SIGKILL when its parent thread dies.

    Runs in the forked child before ``exec``; it only calls an already-resolved libc function.
    If the parent died between ``fork`` and ``prctl`` (we were re-parented), exit at once.
    """

    def preexec() -> None:
        if _libc_prctl is not None:
            _libc_prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


class _Spawner:
    """A single long-lived daemon thread that performs every ``Popen`` (see module docstring)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], Future[Any]]]
        self._jobs = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _run(self) -> None:
        while True:
            fn, fut = self._jobs.get()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # handed to the caller's thread
                    fut.set_exception(exc)

    def submit(self, fn: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        """Run ``fn`` on the spawner thread and return its result."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="devbroker-spawner",
                                                daemon=True)
                self._thread.start()
        fut: Future[subprocess.Popen[bytes]] = Future()
        self._jobs.put((fn, fut))
        return fut.result()


_SPAWNER = _Spawner()


def spawn_group_leader(
    argv: Sequence[str], *, cwd: Path, log: IO[bytes], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session/process group, output appended to ``log``.

    The child is killed by the kernel (SIGKILL) if this Python process dies for any reason,
    and it does not receive the terminal's Ctrl-C (own session): the owner stops it explicitly.
    """

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),  # only calls prctl: fork-safe
        )

    return _SPAWNER.submit(popen)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """True while any process of process group ``pgid`` exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (possibly owned by another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate_group(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """SIGTERM the process group led by ``proc``, SIGKILL it after ``timeout`` s; reap ``proc``.

    Returns the exit code of ``proc`` (None only if it could not be reaped, which should not
    happen after SIGKILL).
    """
    pgid = proc.pid  # the child called setsid(): its pid is its process-group id
    if proc.poll() is None:
        _signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
    # The JVM has no children, but make sure nothing of its group survives it.
    _signal_group(pgid, signal.SIGKILL)
    return proc.returncode


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on ``host`` a moment ago (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if a TCP connection to ``host:port`` succeeds right now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_bindable(host: str, port: int) -> bool:
    """True if ``host:port`` can be bound now (with SO_REUSEADDR, as the JVM does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def poll_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    first_delay: float = 0.05,
    max_delay: float = 0.5,
) -> bool:
    """Call ``condition`` with a short exponential backoff until it is true or ``timeout`` passes.

    Returns the last result (True as soon as the condition held).
    """
    deadline = time.monotonic() + timeout
    delay = first_delay
    while True:
        if condition():
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, max_delay)
