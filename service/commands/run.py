"""``streammom run``: the daemon (Kafka) or the embedded mode (JSONL files / stdin / stdout)."""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from service.checkpoint import CheckpointDirError, CheckpointStore
from service.commands.offline import InputFormatError
from service.config import Settings, build_rollup
from service.logs import setup_logging
from service.malloc_arenas import cap_malloc_arenas
from service.metrics import WorkerMetrics
from service.transport import Sink, Source, TransportError
from service.worker import EXIT_CANNOT_START, MESSAGE_OVERHEAD_BYTES, Worker

__all__ = ["install_signal_handlers", "role_source", "role_worker", "run_daemon"]

_log = logging.getLogger("streammom.run")


def install_signal_handlers(worker: Worker) -> None:
    """SIGTERM/SIGINT: the first sets the stop flag; the second exits immediately with 1."""
    state = {"count": 0}

    def handler(signum: int, frame: FrameType | None) -> None:
        state["count"] += 1
        if state["count"] > 1:
            os._exit(1)
        worker.request_stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _embedded_io(
    settings: Settings, input_path: str, output: str | None, dead_letters: str | None
) -> tuple[Source, Sink]:
    from service.file_transport import FileSink, FileSource

    topics = settings.topics
    routes: dict[str, Any] = {topics.assignments: output or "-",
                              topics.models: Path(settings.checkpoint.dir) / "model.smm"}
    if dead_letters:
        routes[topics.dead_letters] = dead_letters
    source = FileSource(input_path)
    sink = FileSink(routes, envelope_topics=[topics.dead_letters], replace_topics=[topics.models])
    return source, sink


def _kafka_io(settings: Settings, worker_stop: Any) -> tuple[Source, Sink]:
    """Wait until the brokers answer (creating missing topics if ``kafka.create_topics``,
    else one bootstrap round trip), then build the Kafka source and sink.

    An unreachable broker is retried with backoff until ``worker_stop`` is set. A rejected
    login (wrong SASL password, untrusted TLS certificate) is not: it is logged at error level
    ("authentication failed") and the process exits with ``EXIT_CANNOT_START`` (2, via
    ``SystemExit``), like an
    invalid configuration — retrying with the same credentials cannot succeed, and a failing
    start is clearer to an operator than a daemon that stays unready. (The running worker logs
    a later rejection as an error too, but keeps retrying: credentials may be fixed broker-side.)
    """
    from service.kafka_clients import AuthenticationError, ensure_topics, verify_connection
    from service.kafka_sink import KafkaSink

    kafka = settings.kafka
    backoff = settings.worker.backoff_initial_s
    while not worker_stop.is_set():
        try:
            if kafka.create_topics:
                ensure_topics(kafka, settings.topics, scale_out=settings.worker.role != "all")
            else:
                verify_connection(kafka)
            break
        except AuthenticationError as exc:
            _log.error("authentication failed: the broker rejected the credentials; check the "
                       "kafka security settings; exiting with code 2",
                       extra={"error": str(exc), "bootstrap_servers": kafka.bootstrap_servers,
                              "security_protocol": kafka.security_protocol,
                              "sasl_mechanism": kafka.sasl_mechanism})
            raise SystemExit(EXIT_CANNOT_START) from exc
        except TransportError as exc:
            _log.warning("cannot reach the broker to create topics; retrying"
                         if kafka.create_topics else "cannot reach the broker; retrying",
                         extra={"error": str(exc)})
            worker_stop.wait(backoff)
            backoff = min(backoff * 2, settings.worker.backoff_max_s)
    return role_source(settings), KafkaSink(kafka)


def role_source(settings: Settings) -> Source:
    """The Kafka source of ``worker.role``: the input topic in ``kafka.group_id`` (all,
    ingest), or the frames topic in the learners' group ``<kafka.group_id>.learner``."""
    from service.kafka_source import KafkaSource

    kafka, w = settings.kafka, settings.worker
    if w.role == "learner":
        learners = kafka.model_copy(update={"group_id": f"{kafka.group_id}.learner"})
        return KafkaSource(learners, settings.topics.frames, max_poll_records=w.batch_max_records)
    return KafkaSource(kafka, settings.topics.input, max_poll_records=w.batch_max_records)


def role_worker(settings: Settings, source: Source, sink: Sink, metrics: WorkerMetrics,
                 embedded: bool) -> Worker:
    """The worker of ``worker.role``: one process (``all``), ``ingest`` or ``learner``."""
    role = settings.worker.role
    if role == "all":
        metrics.role.info({"role": "all"})
        return Worker(settings, source, sink, metrics=metrics, exit_when_idle=embedded)
    from service.ingest import IngestWorker
    from service.kafka_reader import KafkaTopicReader
    from service.learner import LearnerWorker
    from service.model_follower import ModelFollower
    from service.state_topic import TopicCheckpointStore

    kafka, topics = settings.kafka, settings.topics
    models = ModelFollower(KafkaTopicReader(kafka, topics.models, client_suffix="models"),
                           settings.model.name, build_rollup(settings.model))
    if role == "ingest":
        return IngestWorker(settings, source, sink, models=models, metrics=metrics)
    state = TopicCheckpointStore(
        sink, lambda: KafkaTopicReader(kafka, topics.learner_state, client_suffix="state"),
        topics.learner_state, name=settings.model.name,
        chunk_bytes=kafka.max_request_size - MESSAGE_OVERHEAD_BYTES,
        flush_timeout_s=settings.worker.flush_timeout_s)
    return LearnerWorker(settings, source, sink, state=state, models=models, metrics=metrics)


class _Stop:
    """A stop flag usable before the worker exists (set by the early signal handler)."""

    def __init__(self) -> None:
        import threading

        self.event = threading.Event()

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, seconds: float) -> None:
        self.event.wait(seconds)


def _serve_http(settings: Settings, metrics: WorkerMetrics, **probes: Any) -> Any:
    """Start /metrics, /healthz, /readyz; a port in use is an error naming ``http.port``."""
    from service.http import HealthServer

    host, port = settings.http.host, settings.http.port
    try:
        http = HealthServer(metrics.registry, host=host, port=port, **probes).start()
    except OSError as exc:
        raise OSError(exc.errno, f"cannot serve HTTP: {exc.strerror}",
                      f"{host}:{port} (set http.port)") from exc
    _log.info("http listening", extra={"host": http.host, "port": http.port})
    return http


def run_daemon(
    settings: Settings,
    *,
    input_path: str | None = None,
    output: str | None = None,
    dead_letters: str | None = None,
    serve_http: bool | None = None,
) -> int:
    """Run the worker until SIGTERM/SIGINT (Kafka) or the end of the input (embedded).

    Returns the process exit code (0 after a clean shutdown with a final checkpoint; 2 —
    one error log line, no traceback — when the checkpoint directory is not writable or holds
    checkpoint files none of which is valid: both are checked before any input is consumed,
    so a restart loop never re-produces outputs).
    """
    if input_path is not None and input_path != "-":
        # before anything is opened or created: a typo must not leave an empty output behind
        if not Path(input_path).exists():
            raise FileNotFoundError(errno.ENOENT, "events file not found", input_path)
        if Path(input_path).is_dir():
            raise IsADirectoryError(errno.EISDIR, "events file is a directory", input_path)
        if input_path.lower().endswith((".csv", ".tsv", ".csv.gz", ".tsv.gz")):
            raise InputFormatError(
                f"{input_path}: 'run' reads JSONL events (one JSON object per line, see "
                "'streammom schema'), not CSV; 'streammom fit' and 'assign' read a CSV/TSV of "
                "codes (--csv-column, --csv-separator)")
    if input_path is not None and settings.worker.role != "all":
        raise ValueError(f"worker.role={settings.worker.role} needs Kafka (the frames and "
                         "learner-state topics); the embedded mode (--input) runs role 'all'")
    setup_logging(settings.worker.log_level, log_format=settings.worker.log_format)
    cap_malloc_arenas(settings.worker.malloc_arenas)  # before the Kafka clients' threads
    try:
        CheckpointStore(settings.checkpoint.dir).check_writable()
    except CheckpointDirError as exc:
        _log.error("cannot start: the checkpoint directory is not usable",
                   extra={"dir": str(settings.checkpoint.dir), "error": str(exc)})
        return EXIT_CANNOT_START
    metrics = WorkerMetrics()
    embedded = input_path is not None
    serve = settings.http.enabled and not embedded if serve_http is None else serve_http
    early = _Stop()
    prev = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def early_handler(signum: int, frame: FrameType | None) -> None:
        early.event.set()

    for s in prev:
        signal.signal(s, early_handler)
    worker: Worker | None = None
    http = None
    try:
        if embedded:
            source, sink = _embedded_io(settings, input_path, output, dead_letters)
        else:
            # HTTP first so /healthz answers while we wait for the broker
            holder: dict[str, Worker] = {}
            if serve:
                http = _serve_http(
                    settings, metrics,
                    health=lambda: (True, {"phase": "starting"}) if "w" not in holder
                    else holder["w"].health(),
                    ready=lambda: (False, {"phase": "starting"}) if "w" not in holder
                    else holder["w"].readiness(),
                )
            source, sink = _kafka_io(settings, early)
        worker = role_worker(settings, source, sink, metrics, embedded)
        if not embedded:
            holder["w"] = worker
        elif serve:
            http = _serve_http(settings, metrics, health=worker.health, ready=worker.readiness)
        install_signal_handlers(worker)
        if early.is_set():
            worker.request_stop()
        _log.info("starting", extra={
            "mode": "embedded" if embedded else "kafka",
            "input": input_path or settings.topics.input,
            "checkpoint_dir": str(settings.checkpoint.dir)})
        t0 = time.perf_counter()
        code = worker.run()
        elapsed = time.perf_counter() - t0
        _log.info("exit", extra={"code": code, "seconds": round(elapsed, 3),
                                 "processed": worker.counters["processed"],
                                 "rejected": worker.counters["rejected"]})
        return code
    finally:
        if http is not None:
            http.close()
        for s, handler in prev.items():
            signal.signal(s, handler)
        sys.stdout.flush()
