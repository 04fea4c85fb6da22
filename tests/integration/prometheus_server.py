"""A real Prometheus server (Debian's ``prometheus`` binary) for integration tests.

:class:`PrometheusServer` writes a throw-away config that scrapes the given ``host:port``
targets every second, starts ``prometheus`` on a free 127.0.0.1 port with a temporary TSDB,
waits for ``/-/ready`` and answers instant queries through ``/api/v1/query``.

The server never outlives the test run: it runs in its own process group (killed as a group on
:meth:`PrometheusServer.stop`), the kernel sends it SIGKILL if the pytest process dies
(``PR_SET_PDEATHSIG``), and a :func:`weakref.finalize` finalizer kills the group at interpreter
exit if nothing else did.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "PrometheusError",
    "PrometheusServer",
    "child_dies_with_parent",
    "free_port",
    "kill_process_group",
    "prometheus_binary",
    "running_prometheus",
    "wait_until",
]

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class PrometheusError(RuntimeError):
    """The Prometheus server could not be started or answered with an error."""


def child_dies_with_parent() -> None:
    """``preexec_fn``: ask the kernel to SIGKILL this child when its parent dies."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def kill_process_group(proc: subprocess.Popen[bytes], grace: float = 10.0) -> int | None:
    """SIGTERM the process group led by ``proc``, SIGKILL after ``grace`` seconds; reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=grace)
    # Stragglers in the group (none expected) go too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode


def _finalize_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.2,
    diagnostics: Callable[[], str] | None = None,
    fatal: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``probe`` until it returns a value that is not ``None``/``False``; fail at the deadline.

    Exceptions from ``probe`` count as "not yet" (the last one is reported on timeout), except
    those in ``fatal``, which propagate at once.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    last_value: Any = None
    while True:
        try:
            last_value = probe()
            if last_value is not None and last_value is not False:
                return last_value
        except fatal:
            raise
        except Exception as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            extra = diagnostics() if diagnostics else ""
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for {what}; "
                f"last value={last_value!r}, last error={last_exc!r}\n{extra}"
            )
        time.sleep(interval)


def prometheus_binary() -> str:
    """Path of the ``prometheus`` server binary (Debian package ``prometheus``)."""
    found = shutil.which("prometheus")
    if not found:
        raise PrometheusError(
            "the `prometheus` binary is not on PATH; install it with `make system-deps` "
            "(Debian package `prometheus`)"
        )
    return found


class PrometheusServer:
    """One Prometheus server scraping ``targets`` (``host:port``) under job ``job`` every 1s."""

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        *,
        job: str = "streammom",
        scrape_interval: str = "1s",
        metrics_path: str = "/metrics",
    ) -> None:
        self.workdir = Path(workdir)
        self.targets = list(targets)
        self.job = job
        self.scrape_interval = scrape_interval
        self.metrics_path = metrics_path
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self.log_path = self.workdir / "prometheus.log"

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        if self.port is None:
            raise PrometheusError("server not started")
        return f"http://127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        config = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.scrape_interval,
            },
            "scrape_configs": [
                {
                    "job_name": self.job,
                    "metrics_path": self.metrics_path,
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        return path

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no prometheus log)"
        return "--- prometheus log (tail) ---\n" + "\n".join(text.splitlines()[-lines:])

    def start(self, timeout: float = 60.0, attempts: int = 3) -> PrometheusServer:
        """Start the server and wait until ``/-/ready``; retry on a lost port race."""
        binary = prometheus_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        for attempt in range(1, attempts + 1):
            port = free_port()
            storage = self.workdir / f"tsdb-{attempt}"
            with open(self.log_path, "ab") as log:
                proc = subprocess.Popen(
                    [
                        binary,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={storage}",
                        f"--web.listen-address=127.0.0.1:{port}",
                        "--storage.tsdb.retention.time=1h",
                        "--log.level=info",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    start_new_session=True,
                    preexec_fn=child_dies_with_parent,
                )
            self.proc, self.port = proc, port
            self._finalizer = weakref.finalize(self, _finalize_group, proc.pid)
            try:
                wait_until(
                    functools.partial(self._ready_or_raise, proc),
                    timeout=timeout,
                    what=f"prometheus on :{port} to be ready",
                    diagnostics=self.log_tail,
                    fatal=(_ExitedEarlyError,),
                )
                return self
            except _ExitedEarlyError:
                self.stop()
                if "address already in use" in self.log_tail().lower() and attempt < attempts:
                    continue
                raise PrometheusError(
                    f"prometheus exited with {proc.returncode}\n{self.log_tail()}"
                ) from None
            except BaseException:
                self.stop()
                raise
        raise PrometheusError("could not start prometheus")  # pragma: no cover

    def _ready_or_raise(self, proc: subprocess.Popen[bytes]) -> bool:
        if proc.poll() is not None:
            raise _ExitedEarlyError
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self) -> None:
        """Stop the server (process group SIGTERM, then SIGKILL) and reap it."""
        if self.proc is not None:
            kill_process_group(self.proc)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP API
    def _api(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise PrometheusError(f"GET {path} {params}: HTTP {exc.code}: {detail}") from exc
        if body.get("status") != "success":
            raise PrometheusError(f"GET {path} {params}: {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; the raw ``result`` list (vector) or ``[{"value": ...}]`` (scalar)."""
        data = self._api("/api/v1/query", {"query": promql})
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def query_value(self, promql: str) -> float | None:
        """The single numeric value of an instant query, ``None`` if it returned no series."""
        result = self.query(promql)
        if not result:
            return None
        if len(result) != 1:
            raise PrometheusError(f"{promql!r} returned {len(result)} series, expected one")
        value = float(result[0]["value"][1])
        return None if math.isnan(value) else value

    def targets_health(self) -> list[dict[str, Any]]:
        """Active scrape targets as reported by ``/api/v1/targets``."""
        return list(self._api("/api/v1/targets", {"state": "active"})["activeTargets"])

    def wait_for_value(self, promql: str, expected: float, timeout: float = 60.0) -> float:
        """Poll ``promql`` until its single value equals ``expected``."""

        def probe() -> float | None:
            value = self.query_value(promql)
            return value if value == expected else None

        return wait_until(
            probe,
            timeout=timeout,
            what=f"{promql} == {expected} in prometheus",
            diagnostics=lambda: f"targets: {self.targets_health()}\n{self.log_tail()}",
        )


class _ExitedEarlyError(Exception):
    """The prometheus process exited before it became ready."""


@contextlib.contextmanager
def running_prometheus(
    workdir: Path, targets: Sequence[str], *, job: str = "streammom"
) -> Iterator[PrometheusServer]:
    """Context manager: a started :class:`PrometheusServer`, always stopped on exit."""
    server = PrometheusServer(workdir, targets, job=job)
    server.start()
    try:
        yield server
    finally:
        server.stop()
