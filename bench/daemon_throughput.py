"""Daemon throughput vs a bare kafka-python consume → produce loop, same broker, same run.

    .venv/bin/python bench/daemon_throughput.py [--events 50000] [--bootstrap HOST:PORT]

1. Produce N synthetic encounter events to a fresh topic (starting a local
   ``service.devbroker.KafkaBroker`` if ``--bootstrap`` is not given).
2. **daemon**: the real worker (``KafkaSource``/``KafkaSink``, decode + validate, engine.learn,
   one assignment per event, checkpoints) in this process until all N are processed.
3. **bare**: kafka-python ``KafkaConsumer`` → ``json.loads`` → ``KafkaProducer.send`` to an
   output topic → ``flush`` + ``commit`` per batch — the floor of any Python consumer. Its
   producer has the daemon's client settings (acks, compression, linger, batch size:
   ``service.kafka_sink.producer_record_settings``), so the ratio is the daemon's own work,
   not a difference in client configuration.
4. Print events/s of both and the ratio daemon/bare (target ≥ 0.7).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata
from kafka_bench import create_topics, daemon_worker, drive, kafka_bootstrap, produce

from service.commands.produce import sample_messages
from service.config import load_settings
from service.kafka_sink import producer_record_settings
from service.worker import settle_heap


def produce_events(bootstrap: str, topic: str, n: int) -> None:
    """Produce ``n`` synthetic encounter events (seed 7) to ``topic`` and flush."""
    produce(bootstrap, topic, sample_messages(n, seed=7))


def run_daemon(bootstrap: str, topic: str, n: int, batch: int) -> float:
    run = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(overrides={
            "kafka": {"bootstrap_servers": bootstrap, "group_id": f"bench-daemon-{run}",
                      "create_topics": False},
            "topics": {"input": topic, "assignments": f"{topic}.assign-{run}",
                       "models": f"{topic}.models-{run}", "dead_letters": f"{topic}.dlq-{run}"},
            "checkpoint": {"dir": tmp, "every_events": 50_000, "every_seconds": 30},
            "worker": {"batch_max_records": batch, "model_publish_interval_s": 60},
            "model": {"vocabulary_capacity": 256, "max_leaves": 8, "max_depth": 3,
                      "refit_every": 20_000},
        })
        create_topics(bootstrap, {t: (1, False) for t in (
            settings.topics.assignments, settings.topics.models, settings.topics.dead_letters)})
        worker = daemon_worker(settings)
        seconds, _ = drive(worker, lambda: worker.counters["processed"] >= n)
    return n / seconds


def run_bare(bootstrap: str, topic: str, n: int, batch: int) -> float:
    out = f"{topic}.bare-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {out: (1, False)})
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"bare-{out}",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             max_poll_records=batch)
    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             **producer_record_settings(load_settings().kafka))
    settle_heap()  # the daemon's start-up heap freeze and collector thresholds, like for like
    done, t0 = 0, None
    while done < n:
        polled = consumer.poll(timeout_ms=500, max_records=batch)
        if not polled:
            continue
        if t0 is None:
            t0 = time.perf_counter()
        offsets = {}
        for tp, recs in polled.items():
            for r in recs:
                ev = json.loads(r.value)
                producer.send(out, key=r.key, value=json.dumps(
                    {"event_id": ev["id"], "n_codes": len(ev["codes"])}).encode())
            offsets[tp] = OffsetAndMetadata(recs[-1].offset + 1, "", -1)
            done += len(recs)
        producer.flush()
        consumer.commit(offsets)
    elapsed = time.perf_counter() - t0
    consumer.close(autocommit=False)
    producer.close()
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--bootstrap", default=None)
    args = ap.parse_args()
    with kafka_bootstrap(args.bootstrap) as bootstrap:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, {topic: (args.partitions, False)})
        produce_events(bootstrap, topic, args.events)
        bare = run_bare(bootstrap, topic, args.events, args.batch)
        daemon = run_daemon(bootstrap, topic, args.events, args.batch)
    print(json.dumps({"events": args.events, "batch": args.batch,
                      "bare_events_per_s": round(bare), "daemon_events_per_s": round(daemon),
                      "ratio_daemon_over_bare": round(daemon / bare, 3)}))


if __name__ == "__main__":
    main()
