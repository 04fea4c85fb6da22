"""The daemon at its default settings on a realistic encounter stream (issue #14 acceptance).

    .venv/bin/python bench/daemon_defaults.py [--events 200000] [--partitions 3]

The stream: encounters of ~10 distinct codes drawn from 5,000 codes with Zipf weights (the top
~1,500 codes carry 95 % of the mass), each event from one of 8 groups that favour 100 codes of
their own (so there is structure to learn), produced to a fresh topic of 3 partitions on a local
Apache Kafka broker (``service.devbroker.KafkaBroker``). Then, same broker, same run:

1. **bare**: kafka-python consume → ``json.loads`` → produce → flush + commit per batch;
2. **daemon**: the one-process worker (role ``all``) with the shipped defaults — only the broker,
   the topic names and the checkpoint directory are set — until every event is assigned
   **and learned** (with the assignments of a live stream, ``refit_labels`` current, events
   read during a refit are assigned at once and learned once it is back: the run is over when
   the state covers them; ``assigned_events_per_s`` is the rate up to the last assignment);
3. **bare** again, as in 1 (a consumer group of its own, from the start of the topic).

The daemon is compared with the two bare runs together: their harmonic mean (the mean time an
event), so a machine whose speed drifts during the run — on this shared 2-core VM the bare
loop alone ran 13k–25k events/s from one run to the next — weighs on both sides alike; both
bare runs are printed.

Prints events/s of both and their ratio (target ≥ 0.7), the longest loop stall (the longest
time between two polls of the worker: a batch with its refits, checkpoints and flushes;
target ≤ 1 s) with its parts (``longest_stall_parts``: the work after the earlier poll, its
records and refits, and the later poll's wait), the process's peak RSS (target ≤ 600 MB: the
bare loops around the daemon hold little), the daemon's refits, checkpoints, leaves and
vocabulary fill, and the cyclic collector's collections (generations 0, 1, 2) and pauses over
the daemon's timed run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import resource
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon_throughput import run_bare
from kafka_bench import Stall, create_topics, daemon_worker, drive, kafka_bootstrap, produce

from service.config import load_settings
from service.malloc_arenas import cap_malloc_arenas

N_CODES, N_GROUPS, FAVOURED = 5_000, 8, 100


def zipf_weights(n: int, head: int = 1_500, mass: float = 0.95) -> np.ndarray:
    """Zipf weights ``1/rank^s`` over ``n`` codes, ``s`` set so the top ``head`` carry ``mass``."""
    ranks = np.arange(1, n + 1, dtype=np.float64)
    lo, hi = 0.5, 3.0
    for _ in range(60):  # bisection on the exponent
        s = (lo + hi) / 2
        w = ranks ** -s
        if w[:head].sum() / w.sum() < mass:
            lo = s
        else:
            hi = s
    return w / w.sum()


def encounter_stream(n: int, seed: int = 0, batch: int = 2_000) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of ``n`` encounter events (see the module docstring)."""
    rng = np.random.default_rng(seed)
    codes = np.array([f"C{i:04d}" for i in range(N_CODES)])
    base = np.log(zipf_weights(N_CODES))
    boost = np.zeros((N_GROUPS, N_CODES))
    for g in range(N_GROUPS):
        boost[g, rng.choice(N_CODES, FAVOURED, replace=False)] = np.log(20.0)
    start = 1_767_225_600.0
    for a in range(0, n, batch):
        m = min(batch, n - a)
        groups = rng.integers(0, N_GROUPS, m)
        k = np.clip(rng.poisson(10, m), 1, 30)
        # Gumbel top-k: k distinct codes per event, drawn with the group's weights
        keys = base + boost[groups] + rng.gumbel(size=(m, N_CODES))
        part = np.argpartition(-keys, 30, axis=1)[:, :30]
        order = np.argsort(-np.take_along_axis(keys, part, axis=1), axis=1)
        top = np.take_along_axis(part, order, axis=1)
        for i in range(m):
            event = {"type": "encounter", "id": f"e{a + i}", "entity_id": f"p{(a + i) % 50_000}",
                     "ts": start + a + i, "codes": codes[top[i, :k[i]]].tolist()}
            yield event["entity_id"].encode(), json.dumps(event, separators=(",", ":")).encode()


def run_daemon(bootstrap: str, topic: str, n: int) -> dict[str, float]:
    run = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(overrides={
            "kafka": {"bootstrap_servers": bootstrap, "group_id": f"bench-defaults-{run}"},
            "topics": {"input": topic, "assignments": f"{topic}.assign-{run}",
                       "models": f"{topic}.models-{run}", "dead_letters": f"{topic}.dlq-{run}"},
            "checkpoint": {"dir": tmp},
            "http": {"enabled": False},
        })
        from service.kafka_clients import ensure_topics

        ensure_topics(settings.kafka, settings.topics)
        children_before = _children_cpu()
        worker = daemon_worker(settings)
        cpu_at_start: list[float] = []  # the process's CPU time at the first batch
        helper_hwm: list[float] = []

        pauses = CollectorPauses()
        memory = ProcessMemory(lambda: _helper_pid(worker))

        def started() -> bool:
            if not cpu_at_start:
                pauses.start()
                memory.start()
            cpu_at_start.append(time.process_time())
            return True

        assigned_at: list[float] = []  # when every event had its assignment, and was learned

        def done() -> bool:
            if worker.counters["processed"] < n:
                return False
            if not assigned_at:
                assigned_at.append(time.perf_counter())
            if worker._refits is not None and worker._refits.holding:
                return False  # assigned at once, not learned yet: the run is not over
            assigned_at.append(time.perf_counter())
            helper_hwm.append(_helper_peak_rss_mb(worker))  # before shutdown stops it
            return True

        longest = Stall()
        try:
            seconds, stall = drive(worker, done, started, stall=longest)
            learning_after_s = assigned_at[1] - assigned_at[0]
        finally:
            pauses.stop()
            memory.stop()
        cpu = time.process_time() - cpu_at_start[0]  # every thread's, shutdown included
        helper_cpu = _children_cpu() - children_before  # the refit process, start-up included
        engine = worker.engine
        refits = worker._refits
        return {"daemon_events_per_s": n / seconds,
                "assigned_events_per_s": n / max(seconds - learning_after_s, 1e-9),
                "longest_stall_s": stall,
                "stall_parts": {"work_s": round(longest.work_s, 3),
                                "poll_s": round(longest.poll_s, 3),
                                "records": longest.records, "refits": longest.refits},
                "cpu_us_per_event": 1e6 * cpu / n, "helper_cpu_s": helper_cpu,
                "helper_peak_rss_mb": helper_hwm[0] if helper_hwm else 0.0,
                "daemon_peak_rss_mb": memory.peak_rss_mb,
                "peak_rss_both_mb": memory.peak_rss_both_mb,
                "peak_pss_both_mb": memory.peak_pss_both_mb,
                "helper_refits": refits.helper_refits if refits is not None else 0,
                "refits": worker.refits, "leaves": int(engine.model_.n_leaves),
                "vocabulary": len(engine.vocabulary),
                "oov_tokens": int(engine.vocabulary.oov_count),
                "gc_collections": pauses.collections, "gc_s": pauses.seconds}


class CollectorPauses:
    """The cyclic collector's collections (per generation) and the seconds they took while
    started (``gc.callbacks``), every thread's: design §6 "Interpreter heap"."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._began = 0.0

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.collections[info["generation"]] += 1
            self.seconds += time.perf_counter() - self._began

    def start(self) -> None:
        gc.callbacks.append(self._observe)

    def stop(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)


class ProcessMemory:
    """The daemon's memory while it runs, sampled every ``interval_s`` by a thread: this
    process's peak RSS over the daemon's run alone (``VmHWM``, reset at the start with
    ``/proc/self/clear_refs``, so the producer and the bare loop before it do not count), and
    the peaks of this process and the refit helper together — as RSS summed (the shared
    libraries' pages counted in both) and as PSS summed (``smaps_rollup``: each shared page
    split between the processes mapping it; what the two take of the machine's memory).

    ``smaps_rollup`` walks a process's page tables under its memory-map lock: ~6 ms of CPU
    for a 400 MB process, and the daemon's own page faults wait on that lock meanwhile. Read
    every 0.2 s for both processes it took ~1.2 s of CPU over a 17 s daemon run of this
    2-core machine, which the bare loop before it did not pay. So the PSS is read only when
    the summed RSS (``status``, ~0.05 ms) reaches a new high by ``pss_step_mb``: PSS ≤ RSS,
    and the two peak together unless the shared pages move between the processes."""

    def __init__(self, helper_pid: Callable[[], int | None], interval_s: float = 0.2,
                 pss_step_mb: float = 4.0) -> None:
        self._helper_pid = helper_pid
        self._interval_s = interval_s
        self._pss_step_mb = pss_step_mb
        self._pss_at_rss_mb = float("-inf")  # the summed RSS at the last PSS read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)
        self.peak_rss_both_mb = 0.0
        self.peak_pss_both_mb = 0.0
        self.peak_rss_mb = 0.0

    def start(self) -> None:
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (Linux ≥ 4.0)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.peak_rss_mb = _status_kb("self", "VmHWM") / 1024

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            pids = ["self"] + [str(p) for p in [self._helper_pid()] if p is not None]
            rss = sum(_status_kb(p, "VmRSS") for p in pids) / 1024
            self.peak_rss_both_mb = max(self.peak_rss_both_mb, rss)
            if rss >= self._pss_at_rss_mb + self._pss_step_mb:  # a new high: read the PSS
                self._pss_at_rss_mb = rss
                pss = sum(_rollup_kb(p, "Pss") for p in pids) / 1024
                self.peak_pss_both_mb = max(self.peak_pss_both_mb, pss)


def _status_kb(pid: str, field: str) -> int:
    return _proc_kb(f"/proc/{pid}/status", field)


def _rollup_kb(pid: str, field: str) -> int:
    return _proc_kb(f"/proc/{pid}/smaps_rollup", field)


def _proc_kb(path: str, field: str) -> int:
    """A ``field:  <n> kB`` line of a /proc file, 0 when the process or the field is gone."""
    try:
        text = Path(path).read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in text.splitlines()
                 if line.startswith(field + ":")), 0)


def _helper_pid(worker: Any) -> int | None:
    process = worker._refit_process
    return process.pid if process is not None else None


def _children_cpu() -> float:
    """CPU seconds of this process's children that have ended (the refit process, once the
    worker's shutdown has stopped it; the broker runs on)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _helper_peak_rss_mb(worker: Any) -> float:
    """Peak RSS (VmHWM) of the worker's refit process, 0 when it has none."""
    pid = _helper_pid(worker)
    return 0.0 if pid is None else _status_kb(str(pid), "VmHWM") / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--bootstrap", default=None)
    args = ap.parse_args()
    # as `streammom run` does at its start, before any Kafka client's thread
    cap_malloc_arenas(load_settings().worker.malloc_arenas)
    with kafka_bootstrap(args.bootstrap) as bootstrap:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, {topic: (args.partitions, False)})
        produce(bootstrap, topic, encounter_stream(args.events))
        bare_before = run_bare(bootstrap, topic, args.events, 2_000)
        daemon = run_daemon(bootstrap, topic, args.events)
        bare_after = run_bare(bootstrap, topic, args.events, 2_000)
    bare = 2 / (1 / bare_before + 1 / bare_after)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "events": args.events, "partitions": args.partitions,
        "bare_events_per_s": round(bare), "bare_before_after": [round(bare_before),
                                                                 round(bare_after)],
        "daemon_events_per_s": round(
            daemon["daemon_events_per_s"]),
        "ratio_daemon_over_bare": round(daemon["daemon_events_per_s"] / bare, 3),
        "assigned_events_per_s": round(daemon["assigned_events_per_s"]),
        "longest_stall_s": round(daemon["longest_stall_s"], 3),
        "longest_stall_parts": daemon["stall_parts"], "peak_rss_mb": round(rss_mb),
        "daemon_cpu_us_per_event": round(daemon["cpu_us_per_event"], 1),
        "helper_peak_rss_mb": round(daemon["helper_peak_rss_mb"]),
        **{k: round(daemon[k]) for k in ("daemon_peak_rss_mb", "peak_rss_both_mb",
                                         "peak_pss_both_mb")},
        "helper_cpu_s": round(daemon["helper_cpu_s"], 2),
        **{k: daemon[k] for k in ("refits", "helper_refits", "leaves", "vocabulary",
                                  "oov_tokens")},
        "daemon_gc_collections": daemon["gc_collections"],
        "daemon_gc_s": round(daemon["gc_s"], 3)}))


if __name__ == "__main__":
    main()
