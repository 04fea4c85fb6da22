"""The worker loop on the in-memory transport: batching, DLQ, offsets, commits, checkpoints,
exactly-once state across a crash, broker outage and signal shutdown."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from memory_harness import IN, fill_cohort, memory_worker, small_settings

from service.commands.run import install_signal_handlers
from service.config import Settings
from service.memory_transport import MemoryBroker, MemorySink, MemorySource
from service.metrics import WorkerMetrics
from service.synthetic import generate_cohort, malformed_samples
from service.worker import Worker


def _fill(broker: MemoryBroker, n: int, *, seed: int = 1, partitions: int = 1,
          malformed_every: int = 0) -> tuple[list[str], list[tuple[str, bytes]]]:
    broker.create_topic(IN, partitions)
    ids, bad = [], []
    samples = malformed_samples()
    for i, value in enumerate(generate_cohort(n, seed=seed).event_bytes()):
        ids.append(json.loads(value)["id"])
        broker.append(IN, value, key=str(i).encode(), headers=[("origin", b"test")])
        if malformed_every and (i + 1) % malformed_every == 0:
            reason, raw = samples[len(bad) % len(samples)]
            broker.append(IN, raw, key=b"bad", headers=[("origin", b"test")])
            bad.append((reason, raw))
    return ids, bad


def _assigned_ids(broker: MemoryBroker, settings: Settings) -> list[str]:
    return [json.loads(r.value)["event_id"] for r in broker.records(settings.topics.assignments)]


def test_batches_assignments_and_dead_letters(tmp_path: Path) -> None:
    settings = small_settings(tmp_path)
    broker = MemoryBroker()
    ids, bad = _fill(broker, 2000, malformed_every=97)
    worker = memory_worker(settings, broker)
    assert worker.run() == 0
    total = len(ids) + len(bad)
    # bounded batches, one flush each (+ the final shutdown flush)
    assert worker.batches == -(-total // 250)
    assert worker.sink.flushes >= worker.batches
    # every valid event assigned exactly once, keyed by entity, the model version in the value
    # (no headers: each costs kafka-python ~4 µs a record, BENCHMARKS.md issue #14)
    recs = broker.records(settings.topics.assignments)
    assert sorted(_assigned_ids(broker, settings)) == sorted(ids)
    first = json.loads(recs[0].value)
    assert set(first) == {"event_id", "entity_id", "leaf_id", "path", "margins", "model_version"}
    assert recs[0].key == first["entity_id"].encode()
    assert not any(r.headers for r in recs)
    assert all(isinstance(json.loads(r.value)["model_version"], int) for r in recs)
    # every malformed message dead-lettered with its original bytes and reason headers
    dlq = broker.records(settings.topics.dead_letters)
    assert [(dict(r.headers)["dlq.reason"].decode(), r.value) for r in dlq] == bad
    h = dict(dlq[0].headers)
    assert h["origin"] == b"test" and h["dlq.source.topic"] == IN.encode()
    assert {"dlq.error", "dlq.source.partition", "dlq.source.offset",
            "dlq.service.version"} <= set(h)
    offsets = [int(dict(r.headers)["dlq.source.offset"]) for r in dlq]
    assert all(broker.topics[IN][0][o].value == r.value for o, r in zip(offsets, dlq,
                                                                         strict=True))
    # metrics
    m = worker.metrics
    assert m.events_processed._value.get() == len(ids)
    rejected = {reason: m.events_rejected.labels(reason=reason)._value.get()
                for reason, _ in malformed_samples()}
    assert sum(rejected.values()) == len(bad) and all(v > 0 for v in rejected.values())
    assert m.assignments_published._value.get() == len(ids)
    # at least one model snapshot on the models topic that deserialises
    from streammom.model import HierarchyModel

    models = broker.records(settings.topics.models)
    assert models and models[-1].key == f"streammom/{worker.worker_id}".encode()
    model = HierarchyModel.from_bytes(models[-1].value)
    assert model.version == worker.engine.model_version_
    assert dict(models[-1].headers)["model_version"] == str(model.version).encode()


def test_offsets_commits_follow_flush_and_checkpoint(tmp_path: Path) -> None:
    settings = small_settings(tmp_path)
    broker = MemoryBroker()
    _ids, _ = _fill(broker, 2600)
    events: list[tuple[str, Any]] = []
    worker = memory_worker(settings, broker)
    store = worker.store
    sink_flush, source_commit, save = worker.sink.flush, worker.source.commit, store.save

    def flush(timeout: float) -> None:
        sink_flush(timeout)
        events.append(("flush", len(broker.records(settings.topics.assignments))))

    def commit(offsets: dict) -> None:
        events.append(("commit", dict(offsets)))
        source_commit(offsets)

    def saved(data: Any) -> int:
        out = save(data)
        events.append(("checkpoint", dict(store.load().offsets)))
        return out

    worker.sink.flush, worker.source.commit, store.save = flush, commit, saved
    assert worker.run() == 0
    assert worker.offsets == {(IN, 0): 2600}
    assert broker.committed["streammom"] == {(IN, 0): 2600}
    kinds = [k for k, _ in events]
    for i, kind in enumerate(kinds):
        if kind == "commit":
            # a commit is preceded by the checkpoint of exactly those offsets, itself after a flush
            assert kinds[i - 1] == "checkpoint" and events[i - 1][1] == events[i][1]
            assert "flush" in kinds[:i - 1]
            # the outputs of every committed event were flushed before
            flushed = max(v for k, v in events[:i] if k == "flush")
            assert flushed >= next(iter(events[i][1].values()))
    # checkpoints every 1000 events + the final one
    assert [next(iter(v.values())) for k, v in events if k == "commit"] == [1000, 2000, 2600]


def test_crash_and_restore_gives_the_uninterrupted_state(tmp_path: Path) -> None:
    n = 3000
    # uninterrupted reference run
    ref_settings = small_settings(tmp_path / "ref")
    ref_broker = MemoryBroker()
    ids, _ = _fill(ref_broker, n, malformed_every=211)
    ref = memory_worker(ref_settings, ref_broker)
    assert ref.run() == 0

    settings = small_settings(tmp_path / "crash")
    broker = MemoryBroker()
    _fill(broker, n, malformed_every=211)
    first = memory_worker(settings, broker)
    first.restore()
    for _ in range(7):  # 7 batches of 250 → checkpoint at 1000 records, then "SIGKILL"
        first.process_batch(first.source.poll(250, 0.0))
    assert first.last_checkpoint_offsets == {(IN, 0): 1000}
    del first  # crash: no shutdown, no final checkpoint; outputs of 1000..1750 already produced

    second = memory_worker(settings, broker)
    assert second.run() == 0
    assert second.engine.snapshot() == ref.engine.snapshot()  # byte-identical state
    assigned = _assigned_ids(broker, settings)
    assert set(assigned) == set(ids)  # nothing lost
    assert len(assigned) > len(ids)  # replayed outputs (at least once)
    assert second.counters["processed"] == ref.counters["processed"] == len(ids)


def test_broker_outage_is_retried_not_dead_lettered(tmp_path: Path) -> None:
    settings = small_settings(tmp_path, worker={"heartbeat_timeout_s": 5.0})
    broker = MemoryBroker()
    ids, _ = _fill(broker, 1500)
    worker = memory_worker(settings, broker)
    seen: dict[str, list[bool]] = {"ready": [], "healthy": []}
    calls = {"n": 0}
    real_flush = worker.sink.flush

    def flaky_flush(timeout: float) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            broker.down = True  # the broker dies in the middle of the run
        if broker.down and calls["n"] > 2:  # a retry: the worker saw the failure
            seen["ready"].append(worker.readiness()[0])
            seen["healthy"].append(worker.health()[0])
            if len(seen["ready"]) >= 5:
                broker.down = False
        real_flush(timeout)

    worker.sink.flush = flaky_flush
    assert worker.run() == 0
    assert seen["ready"] and not any(seen["ready"]) and all(seen["healthy"])
    assert sorted(_assigned_ids(broker, settings)) == sorted(ids)
    assert not broker.records(settings.topics.dead_letters)
    assert worker.readiness()[1]["restored"]


def test_readiness_needs_assignment_restore_and_broker(tmp_path: Path) -> None:
    settings = small_settings(tmp_path)
    broker = MemoryBroker()
    _fill(broker, 10)
    worker = memory_worker(settings, broker)
    ok, details = worker.readiness()
    assert not ok and details == {"assigned": False, "restored": False, "model": False,
                                  "broker": False, "checkpoint": True}
    worker.restore()
    worker.source.poll(1, 0.0)
    worker.broker.probe(worker.source)
    assert worker.readiness()[0]


def test_stop_flag_finishes_batch_and_checkpoints(tmp_path: Path) -> None:
    settings = small_settings(tmp_path)
    broker = MemoryBroker()
    _fill(broker, 400)
    worker = Worker(settings, MemorySource(broker, IN), MemorySink(broker),
                    metrics=WorkerMetrics(), exit_when_idle=False)
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", worker.run()))
    thread.start()
    deadline = time.monotonic() + 20
    while worker.counters["processed"] < 400 and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.request_stop()
    thread.join(10)
    assert not thread.is_alive() and result["code"] == 0
    assert worker.store.load().offsets == {(IN, 0): 400}
    assert broker.committed["streammom"] == {(IN, 0): 400}
    assert worker.source.closed and worker.sink.closed


def test_sigterm_sets_the_flag_only(tmp_path: Path) -> None:
    settings = small_settings(tmp_path)
    broker = MemoryBroker()
    _fill(broker, 300)
    worker = Worker(settings, MemorySource(broker, IN), MemorySink(broker),
                    metrics=WorkerMetrics(), exit_when_idle=False)
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        install_signal_handlers(worker)

        def terminate_once_processed() -> None:  # SIGTERM after the input is consumed
            deadline = time.monotonic() + 60
            while worker.offsets.get((IN, 0)) != 300 and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)

        killer = threading.Thread(target=terminate_once_processed)
        killer.start()
        assert worker.run() == 0  # main thread: the handler runs here
        killer.join()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    assert worker.stop_event.is_set()
    assert worker.store.load().offsets == {(IN, 0): 300}


def test_multi_partition_offsets(tmp_path: Path) -> None:
    settings = small_settings(tmp_path)
    broker = MemoryBroker()
    ids, _ = _fill(broker, 900, partitions=3)
    worker = memory_worker(settings, broker)
    assert worker.run() == 0
    ends = broker.end_offsets(IN)
    assert worker.offsets == ends and worker.store.load().offsets == ends
    assert sorted(_assigned_ids(broker, settings)) == sorted(ids)
    assert worker.metrics.consumer_lag.labels(topic=IN, partition="0")._value.get() == 0


def test_the_worker_limits_the_blas_pools_while_it_runs(tmp_path: Path) -> None:
    """``worker.blas_threads`` bounds every BLAS/OpenMP pool during the run (refits would
    otherwise oversubscribe a small machine) and the process's pools are restored after."""
    from threadpoolctl import threadpool_info

    from service.config import build_engine

    def pools() -> list[int]:
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] in ("blas", "openmp")]

    before = pools()
    assert before  # numpy/scipy's BLAS is loaded
    seen: list[list[int]] = []
    settings = small_settings(tmp_path, worker={"blas_threads": 1})
    broker = MemoryBroker()
    broker.create_topic(IN)

    def factory():
        seen.append(pools())
        return build_engine(settings.model)

    worker = Worker(settings, MemorySource(broker, IN), MemorySink(broker),
                    engine_factory=factory, exit_when_idle=True)
    assert worker.run() == 0
    assert seen and all(n == 1 for n in seen[0])
    assert pools() == before


def test_a_refit_is_checkpointed_at_once(tmp_path: Path) -> None:
    """checkpoint.on_refit (default): the batch that refits also writes a checkpoint, so the
    new model is on disk (inspect/report) long before the event schedule's next one."""
    settings = small_settings(tmp_path, checkpoint={"on_refit": True, "every_events": 10**6})
    broker = MemoryBroker()
    fill_cohort(broker, 1200)
    worker = memory_worker(settings, broker)
    worker.restore()
    for _ in range(4):  # 1,000 events: the growth schedule's first refit is due
        assert worker.process_batch(worker.source.poll(250, 0.0))
    assert worker.refits >= 1
    assert worker.store.path.exists()
    from service.checkpoint import decode_checkpoint

    ckpt = decode_checkpoint(worker.store.path)
    assert ckpt.engine().model_version_ == worker.engine.model_version_ >= 1
