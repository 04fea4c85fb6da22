"""Whether the broker answers, as ``/readyz`` reports it, with the transitions logged once."""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["BrokerStatus"]

_log = logging.getLogger("streammom.worker")


class BrokerStatus:
    """The broker's reachability as the worker last saw it.

    A rejected login (the error carries ``authentication_failed``, e.g. the Kafka transport's
    ``AuthenticationError``) is logged once, at error level, even while the broker was already
    down: retrying cannot fix credentials, an operator has to. ``on_down`` runs on every report
    of an unreachable broker (the worker clears its readiness gauge).
    """

    def __init__(self, on_down: Callable[[], None]) -> None:
        self.ok = False
        self._auth_failed = False
        self._on_down = on_down

    def report(self, ok: bool, exc: BaseException | None = None) -> None:
        """Record whether the broker answers and log the transitions."""
        if not ok and getattr(exc, "authentication_failed", False):
            if not self._auth_failed:
                _log.error("authentication failed: the broker rejected the credentials; check "
                           "the kafka security settings (retrying with backoff)",
                           extra={"error": repr(exc)})
            self._auth_failed = True
        elif ok != self.ok:
            if ok:
                _log.info("broker reachable")
            else:
                _log.warning("broker unreachable; retrying with backoff",
                             extra={"error": repr(exc) if exc else None})
        if ok:
            self._auth_failed = False
        self.ok = ok
        if not ok:
            self._on_down()

    def probe(self, source: object) -> None:
        """Ask ``source`` whether its broker answers (``connected()``, non-blocking; the Kafka
        source also reports a frozen broker whose heartbeats go unanswered)."""
        connected = getattr(source, "connected", None)
        ok = True if connected is None else bool(connected())
        error = None if ok else getattr(source, "probe_error", None)
        if ok != self.ok or getattr(error, "authentication_failed", False):
            self.report(ok, error)
