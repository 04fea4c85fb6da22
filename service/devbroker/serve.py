"""``streammom dev-broker``: run a local Apache Kafka broker in the foreground until stopped."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from service.devbroker.broker import KafkaBroker


def serve(*, port: int = 0, data_dir: Path | None = None) -> int:
    """Start a broker, print how to reach it, block until Ctrl-C/SIGTERM, stop it cleanly.

    Returns the process exit code: 0 after a requested stop, 1 if the broker died on its own.
    """
    stop = threading.Event()
    serving = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()
        if not serving.is_set():  # still starting: abort start() (it cleans up)
            raise KeyboardInterrupt

    # SIGINT too: a background job started by a script has SIGINT ignored otherwise.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = KafkaBroker(port=port, data_dir=data_dir)
    try:
        broker.start()
        serving.set()
        _announce(broker)
        while not stop.wait(1.0):
            if not broker.is_running:
                print(f"Kafka broker exited unexpectedly; log tail:\n{broker.log_tail()}",
                      file=sys.stderr, flush=True)
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping Kafka broker ...", file=sys.stderr, flush=True)
        broker.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _announce(broker: KafkaBroker) -> None:
    kept = " (kept)" if broker.persistent else ""
    print(f"Kafka broker ready on {broker.bootstrap} in {broker.startup_seconds:.1f}s "
          f"(pid {broker.pid}, data {broker.workdir}{kept}, log {broker.log_path})",
          file=sys.stderr, flush=True)
    print(broker.bootstrap, flush=True)
    print(f"export STREAMMOM_KAFKA__BOOTSTRAP_SERVERS={broker.bootstrap}", flush=True)
    print("Ctrl-C to stop.", file=sys.stderr, flush=True)
