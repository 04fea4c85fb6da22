"""Progress on stderr for the long commands (``fit``, ``assign``, ``demo``, ``produce-sample``,
``report``): a rich bar when enabled — by default when stderr is a terminal — else nothing."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["byte_progress", "count_progress", "polled_progress", "show_progress", "status"]


def show_progress() -> bool:
    """The default: bars only for a person at a terminal (never in logs or pipes)."""
    return sys.stderr.isatty()


def _progress(*columns: Any) -> Any:
    from rich.console import Console
    from rich.progress import Progress

    return Progress(*columns, console=Console(stderr=True), transient=False)


def _step_progress(label: str) -> Any:
    """A bar counting steps: label, bar, ``done/total``, elapsed time."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    return _progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                     TimeElapsedColumn())


@contextmanager
def count_progress(label: str, total: int, enabled: bool) -> Iterator[Callable[[], None]]:
    """A bar of ``total`` steps; yields ``advance()`` (one step)."""
    if not enabled:
        yield lambda: None
        return
    with _step_progress(label) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


@contextmanager
def byte_progress(label: str, total: int | None,
                  enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A bar over the bytes of an input file (``total`` None: stdin, unknown); yields
    ``update(bytes_read, events)``."""
    if not enabled:
        yield lambda nbytes, events: None
        return
    from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeElapsedColumn

    with _progress(TextColumn(f"[bold]{label}"), BarColumn(), DownloadColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[events]} events")) as bar:
        task = bar.add_task(label, total=total, events=0)
        yield lambda nbytes, events: bar.update(task, completed=nbytes, events=events)


@contextmanager
def polled_progress(label: str, total: int, done: Callable[[], int],
                    enabled: bool) -> Iterator[None]:
    """A bar of ``total`` steps that a helper thread refreshes from ``done()`` ten times a
    second, for work that runs in a loop of its own (the demo's worker)."""
    if not enabled:
        yield
        return
    stop = threading.Event()
    with _step_progress(label) as bar:
        task = bar.add_task(label, total=total)

        def refresh() -> None:
            while not stop.wait(0.1):
                bar.update(task, completed=done())

        thread = threading.Thread(target=refresh, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            bar.update(task, completed=done())


@contextmanager
def status(message: str, enabled: bool) -> Iterator[None]:
    """A spinner with ``message`` while a step without a measurable length runs."""
    if not enabled:
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(message):
        yield
