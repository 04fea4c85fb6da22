"""Would a refit off the daemon's loop help? A refit in a thread beside a busy Python loop.

    .venv/bin/python bench/refit_in_thread.py

The engine at its defaults (vocabulary of 1,024) learns 20,000 encounters of the
``daemon_defaults`` stream, then the same refit runs (1) alone, (2) in a thread while the main
thread runs pure-Python work, as the daemon's loop does between its I/O waits. Prints both
refit times and the main thread's speed during (2) relative to its speed alone. CPython's GIL
decides the outcome: a refit made of many small numpy/scipy calls needs it between calls.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_defaults import encounter_stream

from streammom import StreamingHierarchy, Vocabulary


def _spin(stop: threading.Event) -> int:
    n = 0
    while not stop.is_set():
        for _ in range(1_000):
            n += 1
    return n


def main() -> None:
    events = [json.loads(v)["codes"] for _, v in encounter_stream(20_000)]
    eng = StreamingHierarchy(vocabulary=Vocabulary(capacity=1_024), refit_every=None,
                             first_refit=None)
    for start in range(0, 16_000, 2_000):
        eng.learn(events[start:start + 2_000])
    eng.refit()
    for start in range(16_000, 20_000, 2_000):
        eng.learn(events[start:start + 2_000])
    snapshot = eng.snapshot()

    alone = StreamingHierarchy.restore(snapshot)
    t0 = time.perf_counter()
    alone.refit()
    refit_alone = time.perf_counter() - t0

    stop, counted = threading.Event(), {}
    spinner = threading.Thread(target=lambda: counted.update(n=_spin(stop)))
    spinner.start()
    time.sleep(refit_alone)
    stop.set()
    spinner.join()
    solo_rate = counted["n"] / refit_alone

    beside = StreamingHierarchy.restore(snapshot)
    stop = threading.Event()
    worker = threading.Thread(target=lambda: (beside.refit(), stop.set()))
    t0 = time.perf_counter()
    worker.start()
    n = _spin(stop)
    worker.join()
    refit_beside = time.perf_counter() - t0
    print(json.dumps({"refit_alone_s": round(refit_alone, 3),
                      "refit_in_thread_s": round(refit_beside, 3),
                      "loop_speed_during_refit": round(n / refit_beside / solo_rate, 2)}))


if __name__ == "__main__":
    main()
