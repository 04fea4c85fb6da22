"""The dead-letter copy of a record the worker cannot process (design §6, "nothing is lost").

The ``dlq.*`` headers are the worker's and come first: why (``dlq.reason``, ``dlq.error``),
where from (``dlq.source.topic`` / ``.partition`` / ``.offset``) and which service version. A
sender's own ``dlq.*`` headers are kept renamed ``input.dlq.*``, so they can never pass for the
real ones. A record too large for the producer (``kafka.max_request_size``) becomes a truncated
copy with ``dlq.truncated``, ``dlq.original.bytes`` and ``dlq.original.sha256`` (of the whole
value) — never dropped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from service.events import Rejection
from service.transport import Record

__all__ = ["DeadLetter", "dead_letter", "headers_size"]

Headers = list[tuple[str, bytes]]


def headers_size(headers: Headers) -> int:
    """An upper bound of the bytes ``headers`` add to a record, as the producer counts them
    against ``max_request_size``: UTF-8 bytes of each name (not characters), the value, and
    up to 5 + 5 bytes of varint lengths per header (many tiny headers add up)."""
    return sum(len(name.encode("utf-8", "surrogatepass")) + len(value or b"") + 10
               for name, value in headers)


@dataclass(frozen=True)
class DeadLetter:
    """What to produce to the dead-letter topic; ``original_bytes`` is set when truncated."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    original_bytes: int | None = None


def dead_letter(rec: Record, rejection: Rejection, *, budget: int,
                service_version: str) -> DeadLetter:
    """The dead letter of ``rec``, fitting ``budget`` bytes of key + value + headers."""
    headers: Headers = [
        ("dlq.reason", rejection.reason.encode()),
        ("dlq.error", rejection.error.encode("utf-8", "replace")),
        ("dlq.source.topic", rec.topic.encode()),
        ("dlq.source.partition", str(rec.partition).encode()),
        ("dlq.source.offset", str(rec.offset).encode()),
        ("dlq.service.version", service_version.encode()),
    ]
    carried = [(f"input.{name}" if name.lower().startswith("dlq.") else name, value)
               for name, value in rec.headers]
    if headers_size(carried) > budget // 4:  # a sender's headers alone could not fit
        carried = [("dlq.input.headers.dropped", str(len(carried)).encode())]
    headers += carried
    key, value = rec.key, rec.value
    if key is None and value is None:  # a record with neither (or unreadable): Kafka needs one
        value = b""
    room = budget - headers_size(headers) - 512  # + the truncation headers below
    if len(key or b"") + len(value or b"") <= room:
        return DeadLetter(key, value, headers)
    whole = value or b""
    headers += [("dlq.truncated", b"true"),
                ("dlq.original.bytes", str(len(whole)).encode()),
                ("dlq.original.sha256", hashlib.sha256(whole).hexdigest().encode())]
    if key is not None and len(key) > room // 2:
        headers.append(("dlq.original.key.sha256", hashlib.sha256(key).hexdigest().encode()))
        key = key[: room // 2]
    return DeadLetter(key, whole[: room - len(key or b"")], headers, original_bytes=len(whole))
