"""Logs to stderr: JSON (one object per line, ``extra={...}`` fields included) for collectors,
or one readable line per record on a terminal (``worker.log_format``: ``auto`` picks console
when stderr is a TTY)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["ConsoleFormatter", "JsonFormatter", "setup_logging"]

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...extra}`` per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class ConsoleFormatter(logging.Formatter):
    """``HH:MM:SS level logger: message key=value …`` (local time), for people at a terminal.

    >>> r = logging.makeLogRecord({"name": "streammom.worker", "levelname": "INFO",
    ...                            "msg": "refit", "created": 0.0, "leaves": 4})
    >>> ConsoleFormatter().format(r).split(" ", 1)[1]
    'INFO  worker: refit  leaves=4'
    """

    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={v}" for k, v in vars(record).items()
                         if k not in _STANDARD and not k.startswith("_"))
        name = record.name.removeprefix("streammom.")
        line = (f"{time.strftime('%H:%M:%S', time.localtime(record.created))} "
                f"{record.levelname:<5} {name}: {record.getMessage()}")
        if extra:
            line += f"  {extra}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str = "INFO", *, log_format: str = "auto") -> None:
    """Route the ``streammom`` loggers (and kafka-python's warnings) to stderr: JSON, or
    console lines (``log_format="console"``, or ``"auto"`` with stderr a terminal)."""
    console = log_format == "console" or (log_format == "auto" and sys.stderr.isatty())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ConsoleFormatter() if console else JsonFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("streammom").setLevel(level)
    # kafka-python logs every reconnect attempt at WARNING/ERROR during an outage
    logging.getLogger("kafka").setLevel(logging.CRITICAL if level != "DEBUG" else logging.INFO)
