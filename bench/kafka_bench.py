"""Shared parts of the benches that run against a Kafka broker: the broker, topics, input and
the loop that drives a worker with a stopwatch."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaProducer

from service.commands.run import role_source, role_worker
from service.config import Settings
from service.kafka_sink import KafkaSink
from service.metrics import WorkerMetrics
from service.worker import Worker

__all__ = ["Stall", "create_topics", "daemon_worker", "drive", "kafka_bootstrap", "produce"]


def daemon_worker(settings: Settings) -> Worker:
    """The worker ``streammom run`` builds for ``settings`` (its ``worker.role``), on Kafka."""
    return role_worker(settings, role_source(settings), KafkaSink(settings.kafka),
                       WorkerMetrics(), embedded=False)


@contextlib.contextmanager
def kafka_bootstrap(bootstrap: str | None) -> Iterator[str]:
    """``bootstrap`` as given, or a local ``service.devbroker.KafkaBroker`` started for the
    run (and closed after it)."""
    if bootstrap is not None:
        yield bootstrap
        return
    from service.devbroker import KafkaBroker

    broker = KafkaBroker().start()
    try:
        yield broker.bootstrap
    finally:
        broker.close()


def create_topics(bootstrap: str, topics: dict[str, tuple[int, bool]]) -> None:
    """``{name: (partitions, compacted)}``, replication factor 1."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({n: {"num_partitions": p, "replication_factor": 1,
                                 **({"configs": {"cleanup.policy": "compact"}} if c else {})}
                             for n, (p, c) in topics.items()}, wait_for_metadata=True)
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, messages: Iterable[tuple[bytes | None, bytes]]) -> None:
    """Produce ``(key, value)`` messages (gzip, large batches) and flush."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=512 * 1024,
                             compression_type="gzip")
    for key, value in messages:
        producer.send(topic, key=key, value=value)
    producer.flush(300)
    producer.close()


@dataclass
class Stall:
    """The longest time between two polls of :func:`drive`, in its parts: the work after the
    earlier poll (a batch — with ``refits`` refits started or collected — or the idle step)
    and the later poll's own wait for records."""

    seconds: float = 0.0
    work_s: float = 0.0
    poll_s: float = 0.0
    records: int = 0
    refits: int = 0


def drive(worker: Worker, done: Callable[[], bool],
          started: Callable[[], bool] = lambda: True, *, stall: Stall | None = None
          ) -> tuple[float, float]:
    """Run the worker's loop steps (poll, aligned blocks, process, idle work) until ``done()``.

    Returns ``(seconds, longest_stall)``: the time from the first batch processed while
    ``started()`` (after start-up, election and take-over) to the end, and the longest time
    between two polls in that span (a batch with its refits, checkpoints and flushes, and the
    next poll's wait); ``stall``, when given, receives that interval's parts. The worker is
    shut down after.
    """
    worker.restore()
    t0: float | None = None
    last: float | None = None
    longest = stall if stall is not None else Stall()
    work_s, records, refits = 0.0, 0, 0
    while not done():
        asked = time.perf_counter()
        polled = worker.source.poll(worker.poll_max_records, worker.poll_timeout())
        now = time.perf_counter()
        if t0 is not None and last is not None and now - last > longest.seconds:
            longest.seconds, longest.work_s, longest.poll_s = now - last, work_s, now - asked
            longest.records, longest.refits = records, refits
        last = now
        ready = worker.take_ready(polled)
        records, refits = len(ready), worker.refits
        if ready:
            if t0 is None and started():
                t0 = now
            worker.process_batch(ready)
        elif not polled:
            worker._idle()
        work_s, refits = time.perf_counter() - now, worker.refits - refits
    seconds = time.perf_counter() - (t0 or time.perf_counter())
    worker.shutdown()
    return seconds, longest.seconds
