"""Scale-out capacity: one learner's events/s from frames against one ingest worker's events/s,
same broker, same run (issue #16; docs/design.md §6 "capacity").

    .venv/bin/python bench/scale_out.py [--events 100000] [--partitions 4] [--bootstrap HOST:PORT]

1. Produce N synthetic encounter events to a fresh input topic of ``--partitions`` partitions
   (starting a local ``service.devbroker.KafkaBroker`` if ``--bootstrap`` is not given).
2. **ingest**: one ``IngestWorker`` (role ingest, default settings) reads all of them —
   decode, validate, route with the followed model, one assignment per event, one frame per
   partition and batch to the frames topic, commit — until all N are framed.
3. **learner**: one ``LearnerWorker`` (role learner, default settings) takes over and learns
   the N events from the frames topic, publishing models and checkpointing its state to the
   learner-state topic, until its state holds all N.
4. **all**: the one-process worker (role all, default settings) on the same input, for
   reference.

Prints events/s of each and ``learner / ingest``: how many ingest workers one learner serves.
Every worker runs with the shipped defaults (model, checkpoint and worker sections); only the
broker address, the topic names and the checkpoint directory are set.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon_throughput import produce_events
from kafka_bench import create_topics, daemon_worker, drive, kafka_bootstrap

from service.config import Settings, load_settings


def _settings(bootstrap: str, prefix: str, role: str, tmp: str) -> Settings:
    return load_settings(overrides={
        "kafka": {"bootstrap_servers": bootstrap, "group_id": f"{prefix}-{role}",
                  "create_topics": False},
        "topics": {"input": f"{prefix}.events", "assignments": f"{prefix}.assignments",
                   "models": f"{prefix}.models", "dead_letters": f"{prefix}.dlq",
                   "frames": f"{prefix}.frames", "learner_state": f"{prefix}.state"},
        "checkpoint": {"dir": tmp},
        "worker": {"role": role},
        "http": {"enabled": False},
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--bootstrap", default=None)
    args = ap.parse_args()
    n = args.events
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    with kafka_bootstrap(args.bootstrap) as bootstrap:
        create_topics(bootstrap, {f"{prefix}.events": (args.partitions, False),
                                  f"{prefix}.assignments": (args.partitions, False),
                                  f"{prefix}.dlq": (1, False), f"{prefix}.frames": (1, False),
                                  f"{prefix}.models": (1, True), f"{prefix}.state": (1, True)})
        produce_events(bootstrap, f"{prefix}.events", n)
        with tempfile.TemporaryDirectory() as tmp:
            ingest = daemon_worker(_settings(bootstrap, prefix, "ingest", tmp))
            t_ingest, _ = drive(ingest, lambda: ingest.counters["processed"] >= n)
            learner = daemon_worker(_settings(bootstrap, prefix, "learner", tmp))
            t_learner, _ = drive(learner, lambda: learner.counters["processed"] >= n,
                                 lambda: learner.active)
            one = daemon_worker(_settings(bootstrap, prefix, "all", tmp))
            t_all, _ = drive(one, lambda: one.counters["processed"] >= n)
    ingest_rate, learner_rate, all_rate = n / t_ingest, n / t_learner, n / t_all
    print(json.dumps({
        "events": n, "partitions": args.partitions,
        "ingest_events_per_s": round(ingest_rate), "learner_events_per_s": round(learner_rate),
        "all_in_one_events_per_s": round(all_rate),
        "ingest_workers_per_learner": round(learner_rate / ingest_rate, 2),
        "learner_refits": learner.refits, "learner_model_version": int(
            learner.engine.model_version_)}))


if __name__ == "__main__":
    main()
