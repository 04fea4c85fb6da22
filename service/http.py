"""One small threaded WSGI server (wsgiref): ``/metrics``, ``/healthz``, ``/readyz``.

* ``/metrics`` — ``prometheus_client.make_wsgi_app`` on the worker's registry.
* ``/healthz`` — 200 while the loop heartbeat is fresh (also during a broker outage: restarting
  the process would not bring the broker back), 503 when it is stale.
* ``/readyz`` — 200 iff partitions are assigned, state is restored, a model is present and the
  broker is reachable; 503 otherwise. The body is a small JSON document with the details.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

__all__ = ["HealthServer"]

_log = logging.getLogger("streammom.http")

StatusFn = Callable[[], tuple[bool, dict[str, Any]]]


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("http " + format, *args)


class HealthServer:
    """Serve metrics and health of one worker on ``host:port`` (port 0 = pick a free one)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        health: StatusFn,
        ready: StatusFn,
        host: str = "0.0.0.0",
        port: int = 9108,
    ) -> None:
        self._metrics_app = make_wsgi_app(registry)
        self._health = health
        self._ready = ready
        self._server = make_server(
            host, port, self._app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self.host = host
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="streammom-http", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return self._metrics_app(environ, start_response)
        if path in ("/healthz", "/readyz"):
            ok, details = (self._health if path == "/healthz" else self._ready)()
            body = json.dumps({"status": "ok" if ok else "unavailable", **details}).encode()
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
            )
            return [body]
        body = b"streammom: /metrics /healthz /readyz\n"
        start_response(
            "404 Not Found",
            [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))],
        )
        return [body]
