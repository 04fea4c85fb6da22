"""``FILE`` or ``-`` arguments of the batch commands, opened as binary streams."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Literal


@contextmanager
def binary_stream(path: str, mode: Literal["rb", "wb"]) -> Iterator[IO[bytes]]:
    """Open ``path`` for binary reading or writing; ``-`` is stdin/stdout (flushed, not closed)."""
    if path == "-":
        stream = sys.stdin.buffer if mode == "rb" else sys.stdout.buffer
        try:
            yield stream
        finally:
            if mode == "wb":
                stream.flush()
        return
    with open(path, mode) as fh:
        yield fh
