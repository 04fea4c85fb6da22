"""A real, single-node Apache Kafka broker (KRaft, broker+controller) on 127.0.0.1.

For tests and local development only: plaintext, no auth (optionally a second, SASL/PLAIN
listener: ``sasl_plain_users``), replication factor 1.

    with KafkaBroker() as broker:          # free ports, fresh temp dir, deleted on exit
        use(broker.bootstrap)              # "127.0.0.1:PORT"
        broker.stop(); broker.start()      # same port, same data (outage tests)

No orphan JVM, whatever happens to the Python process (verified with SIGINT at several points
of a pytest run, a double Ctrl-C in teardown, SIGTERM and SIGKILL of pytest):

* normal end / exception / Ctrl-C: ``close()`` from the context manager or fixture finalizer
  (pytest turns SIGINT into KeyboardInterrupt and still runs session finalizers), which sends
  SIGTERM to the JVM's process group, SIGKILLs it after ``stop_timeout`` and reaps it;
* anything that skips finalizers but still exits Python normally: an ``atexit`` hook closes
  every broker that was started and not closed;
* Python killed outright (SIGKILL, default SIGTERM action, crash): the JVM was started with
  ``PR_SET_PDEATHSIG=SIGKILL`` (see ``_proc``), so the kernel kills it; its temp dir is swept
  by the next broker start (``owner.pid`` of a dead process);
* the JVM has its own session, so a terminal's Ctrl-C reaches only Python, which then stops
  the broker in order instead of racing it.
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from service.devbroker import _proc
from service.devbroker.libs import LOG4J2_CONFIG, find_kafka_libs

HOST = "127.0.0.1"
DEFAULT_JVM_OPTS: tuple[str, ...] = (
    "-Xms256m",
    "-Xmx768m",
    "-XX:+UseSerialGC",  # 2 shared cores: no concurrent GC threads
    "-XX:TieredStopAtLevel=1",  # C1 only: faster start, less CPU; plenty for tests
    "-XX:-UsePerfData",  # no /tmp/hsperfdata_* files
    "-Djava.awt.headless=true",
    "-Dlog4j2.shutdownHookEnabled=false",  # keep logging through the broker's own shutdown
)
# Broker message size limit (Kafka's default, stated explicitly: model manifests must fit).
MESSAGE_MAX_BYTES = 1_048_588

_TEMP_PREFIX = "streammom-kafka-"
_OWNER_FILE = "owner.pid"

_log = logging.getLogger(__name__)


class BrokerError(RuntimeError):
    """The broker could not be started (the message carries the broker log tail)."""


def new_cluster_id() -> str:
    """A KRaft cluster id: URL-safe base64 of 16 random bytes, no padding (22 chars).

    Like Kafka's ``Uuid.randomUuid()``, never one that starts with ``-``: the storage tool's
    argument parser would read it as an option ("--cluster-id/-t: expected one argument").
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def server_properties(
    *, port: int, controller_port: int, log_dir: Path, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """server.properties for a single-node combined broker+controller (ecosystem.md §1.3)."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",  # static quorum
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",  # tests create topics explicitly, like prod
        "message.max.bytes": str(MESSAGE_MAX_BYTES),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",  # default 50: slow first group join on 2 cores
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",  # default 3000
        "num.network.threads": "1",
        "num.io.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),  # default 128 MiB of heap
    }
    props.update(overrides or {})
    return props


_JAAS_FORBIDDEN = frozenset('"\\;\n\r =')


def sasl_plain_properties(
    *, port: int, sasl_port: int, controller_port: int, users: Mapping[str, str]
) -> dict[str, str]:
    """Extra server.properties for a second listener, ``SASL_PLAINTEXT`` with mechanism PLAIN
    on ``sasl_port``, accepting ``users`` (name → password).

    The PLAINTEXT listener stays (inter-broker traffic and the start-up readiness probe use
    it), so tests reach the same broker with and without authentication. Names and passwords
    must not need quoting in the JAAS line (no quotes, backslashes, ``;``, ``=`` or spaces).
    """
    if not users:
        raise ValueError("sasl_plain_users needs at least one user")
    for name, password in users.items():
        if not name or _JAAS_FORBIDDEN.intersection(name + password):
            raise ValueError(f"unsupported character in SASL user {name!r} or its password")
    entries = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return {
        "listeners": (f"PLAINTEXT://{HOST}:{port},SASL_PLAINTEXT://{HOST}:{sasl_port},"
                      f"CONTROLLER://{HOST}:{controller_port}"),
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port},SASL_PLAINTEXT://{HOST}:{sasl_port}",
        "listener.security.protocol.map": (
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
        ),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {entries};"
        ),
    }


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    lines = [f"{key}={value}" for key, value in props.items()]
    path.write_text("# generated by service.devbroker\n" + "\n".join(lines) + "\n")


def _sweep_stale_tempdirs() -> None:
    """Delete temp broker dirs whose owning Python process is gone (it was SIGKILLed/SIGTERMed:
    PDEATHSIG killed its JVM, but nobody removed the dir)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_TEMP_PREFIX}*"):
        try:
            owner = int((path / _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being created
        if not _proc.pid_alive(owner):
            shutil.rmtree(path, ignore_errors=True)


def _find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError("`java` (17+) not found on PATH or in $JAVA_HOME")
    return java


def java_available() -> bool:
    """True if a ``java`` executable is available."""
    try:
        _find_java()
    except BrokerError:
        return False
    return True


class KafkaBroker:
    """A restartable single-node Apache Kafka broker running in a child JVM.

    Args:
        port: PLAINTEXT port on 127.0.0.1; 0 picks a free one (kept across restarts).
        controller_port: KRaft controller port; 0 picks a free one (kept across restarts).
        data_dir: persistent working dir (kept by :meth:`close`); None = a fresh temp dir
            that :meth:`close` deletes.
        libs_dir: directory of broker jars; None = :func:`find_kafka_libs`.
        startup_timeout: seconds to wait for the broker to answer admin requests.
        stop_timeout: seconds to wait after SIGTERM before SIGKILL.
        jvm_opts: JVM flags (default :data:`DEFAULT_JVM_OPTS`).
        overrides: extra/overriding server.properties entries.
        sasl_plain_users: name → password; adds a ``SASL_PLAINTEXT`` listener (mechanism
            PLAIN) on a second port (:attr:`sasl_bootstrap`) next to the PLAINTEXT one, for
            authentication tests (see :func:`sasl_plain_properties`).
    """

    def __init__(
        self,
        *,
        port: int = 0,
        controller_port: int = 0,
        data_dir: str | os.PathLike[str] | None = None,
        libs_dir: str | os.PathLike[str] | None = None,
        startup_timeout: float = 90.0,
        stop_timeout: float = 20.0,
        jvm_opts: tuple[str, ...] = DEFAULT_JVM_OPTS,
        overrides: Mapping[str, str] | None = None,
        sasl_plain_users: Mapping[str, str] | None = None,
    ) -> None:
        self._requested_port = port
        self._requested_controller_port = controller_port
        self._owns_dir = data_dir is None
        self._workdir: Path | None = None if data_dir is None else Path(data_dir).resolve()
        self._libs_dir = None if libs_dir is None else Path(libs_dir)
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._jvm_opts = tuple(jvm_opts)
        self._overrides = dict(overrides or {})
        self._sasl_users = dict(sasl_plain_users) if sasl_plain_users else None
        self._sasl_port: int | None = None
        self._port: int | None = None
        self._controller_port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._log_start = 0
        self._lock = threading.RLock()
        self.startup_seconds: float | None = None  # wall time of the last successful start()

    # ----------------------------------------------------------------- properties
    @property
    def port(self) -> int:
        """The PLAINTEXT port (fixed after the first start)."""
        if self._port is None:
            raise BrokerError("broker was never started")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` for ``bootstrap_servers``."""
        return f"{HOST}:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` of the SASL_PLAINTEXT/PLAIN listener (``sasl_plain_users``)."""
        if self._sasl_users is None:
            raise BrokerError("broker was created without sasl_plain_users")
        if self._sasl_port is None:
            raise BrokerError("broker was never started")
        return f"{HOST}:{self._sasl_port}"

    @property
    def pid(self) -> int | None:
        """PID (= process-group id) of the running JVM, else None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def is_running(self) -> bool:
        """True while the JVM process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def workdir(self) -> Path:
        """Working dir: server.properties, broker.log, kraft-data/."""
        if self._workdir is None:
            raise BrokerError("broker was never started")
        return self._workdir

    @property
    def persistent(self) -> bool:
        """True if the data dir was given by the caller (then :meth:`close` keeps it)."""
        return not self._owns_dir

    @property
    def log_path(self) -> Path:
        """The broker's stdout/stderr (console log4j2 at WARN, plus the "started" line)."""
        return self.workdir / "broker.log"

    def log_tail(self, lines: int = 60) -> str:
        """Last ``lines`` lines the broker wrote since the latest start()."""
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(self._log_start)
                text = fh.read().decode(errors="replace")
        except (OSError, BrokerError):
            return "<no broker log>"
        return "\n".join(text.splitlines()[-lines:])

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        """Start the JVM (formatting storage on first use) and wait until it serves requests."""
        with self._lock:
            if self.is_running:
                return self
            if self._proc is not None:  # it died on its own: reap it, close its log
                self.stop()
            began = time.monotonic()
            _LIVE.add(self)  # from here on, the atexit hook cleans up whatever exists
            libs = self._libs_dir or find_kafka_libs()
            self._prepare_workdir()
            self._format_storage(libs)
            self._launch(libs)
            try:
                self._await_ready()
            except BaseException:
                self.stop()
                raise
            self.startup_seconds = time.monotonic() - began
            _log.info("Kafka broker %s ready in %.1fs (pid %s)", self.bootstrap,
                      self.startup_seconds, self.pid)
            return self

    def stop(self, timeout: float | None = None) -> int | None:
        """Stop the JVM (SIGTERM to its group, SIGKILL after ``timeout``); data is kept.

        A graceful stop takes ~0.5-2 s. ``stop(timeout=0)`` is a hard kill (crash simulation);
        the next ``start()`` then takes ~10 s longer: the controller refuses the new broker
        incarnation until the old one's session expires (``broker.session.timeout.ms`` = 9 s).
        Returns the JVM's exit code (143 after SIGTERM, -9 if killed; None if not running).
        """
        with self._lock:
            proc, self._proc = self._proc, None
            code = None
            if proc is not None:
                grace = self.stop_timeout if timeout is None else timeout
                code = _proc.terminate_group(proc, grace)
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            return code

    def restart(self) -> Self:
        """``stop()`` then ``start()``: same ports, same data."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the broker and delete its temp dir (a user-given ``data_dir`` is kept)."""
        with self._lock:
            self.stop()
            _LIVE.discard(self)
            if self._owns_dir and self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.is_running else "stopped"
        where = self.bootstrap if self._port else "unstarted"
        return f"KafkaBroker({where}, {state})"

    # ----------------------------------------------------------------- internals
    def _prepare_workdir(self) -> None:
        if self._workdir is None:
            _sweep_stale_tempdirs()
            self._workdir = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX))
            (self._workdir / _OWNER_FILE).write_text(str(os.getpid()))
        self._workdir.mkdir(parents=True, exist_ok=True)
        if self._port is None:
            self._port = self._requested_port or _proc.free_port(HOST)
        if self._controller_port is None:
            self._controller_port = self._requested_controller_port or _proc.free_port(HOST)
        ports = [self._port, self._controller_port]
        overrides = dict(self._overrides)
        if self._sasl_users is not None:
            while self._sasl_port is None or self._sasl_port in ports:
                self._sasl_port = _proc.free_port(HOST)
            ports.append(self._sasl_port)
            overrides = {**sasl_plain_properties(
                port=self._port, sasl_port=self._sasl_port,
                controller_port=self._controller_port, users=self._sasl_users,
            ), **overrides}
        for p in ports:
            if not _proc.port_bindable(HOST, p):
                raise BrokerError(f"port {HOST}:{p} is already in use")
        props = server_properties(
            port=self._port,
            controller_port=self._controller_port,
            log_dir=self.workdir / "kraft-data",
            overrides=overrides,
        )
        _write_properties(self.workdir / "server.properties", props)

    def _java_cmd(self, libs: Path, main_class: str, *args: str) -> list[str]:
        return [
            _find_java(),
            *self._jvm_opts,
            f"-Dkafka.logs.dir={self.workdir}",
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            "-cp",
            f"{libs}/*",
            main_class,
            *args,
        ]

    def _format_storage(self, libs: Path) -> None:
        """Run ``kafka-storage format`` once per data dir (a formatted dir must not be redone)."""
        if (self.workdir / "kraft-data" / "meta.properties").exists():
            return
        cmd = self._java_cmd(libs, "kafka.tools.StorageTool", "format",
                             "-t", new_cluster_id(), "-c", str(self.workdir / "server.properties"))
        out = self.workdir / "format.log"
        with out.open("wb") as fh:  # spawned like the broker: cannot outlive us either
            proc = _proc.spawn_group_leader(cmd, cwd=self.workdir, log=fh)
            try:
                code = proc.wait(timeout=120)
            except BaseException:
                _proc.terminate_group(proc, timeout=5)
                raise
        if code != 0:
            raise BrokerError(f"kafka storage format failed (exit {code}):\n"
                              f"{out.read_text(errors='replace')[-4000:]}")

    def _launch(self, libs: Path) -> None:
        self._log_file = self.log_path.open("ab")
        self._log_start = self._log_file.tell()
        cmd = self._java_cmd(libs, "kafka.Kafka", str(self.workdir / "server.properties"))
        self._proc = _proc.spawn_group_leader(cmd, cwd=self.workdir, log=self._log_file)

    def _await_ready(self) -> None:
        """Poll (short backoff) until an admin describe_cluster shows our unfenced broker."""
        if not _proc.poll_until(self._ready_or_dead, timeout=self.startup_timeout):
            raise BrokerError(f"Kafka broker on {self.bootstrap} not ready after "
                              f"{self.startup_timeout:.0f}s; log tail:\n{self.log_tail()}")
        if not self.is_running:
            code = self._proc.returncode if self._proc else None
            raise BrokerError(f"Kafka broker exited during startup (exit {code}); "
                              f"log tail:\n{self.log_tail()}")

    def _ready_or_dead(self) -> bool:
        if not self.is_running:
            return True  # stop polling; _await_ready reports the death
        if not _proc.port_accepts(HOST, self.port):
            return False
        return admin_ready(self.bootstrap)


def admin_ready(bootstrap: str, timeout_ms: int = 3000) -> bool:
    """True if an admin ``describe_cluster`` answers with at least one unfenced broker."""
    from kafka import KafkaAdminClient  # local import: keep `import service.devbroker` light

    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="streammom-devbroker-probe",
            request_timeout_ms=timeout_ms,
            bootstrap_timeout_ms=timeout_ms,
        )
    except Exception:
        return False
    try:
        cluster = admin.describe_cluster()
        return any(not b.get("is_fenced", False) for b in cluster.get("brokers", []))
    except Exception:
        return False
    finally:
        admin.close()


# Every started, not yet closed broker; the atexit hook stops them (JVM exit also triggers
# PDEATHSIG, but a clean stop keeps persistent data dirs consistent and deletes temp dirs).
_LIVE: set[KafkaBroker] = set()


@atexit.register
def _close_all() -> None:
    for broker in list(_LIVE):
        try:
            broker.close()
        except Exception:  # best effort at interpreter exit
            _log.exception("failed to stop %r at exit", broker)
