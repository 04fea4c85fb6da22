"""Input events: the wire schema (pydantic v2) and a decoder that classifies every failure.

Two event types share one JSON object shape, discriminated by ``type``::

    {"type": "encounter", "id": "e1", "entity_id": "p42", "ts": "2026-01-02T03:04:05Z",
     "codes": ["I50.9", "E11.9"]}
    {"type": "document", "id": "d1", "entity_id": "u7", "ts": 1767323045.0,
     "tokens": ["heart", "failure"]}                    # or "counts": {"heart": 2}

``ts`` is either an RFC 3339 timestamp string with an offset (``"2026-01-02T03:04:05Z"``) or a
JSON *number* of epoch **seconds**; both become a float of epoch seconds. Nothing else: a
numeric string (``"1767225600"``) is rejected, as is any time outside
``[limits.min_ts, limits.max_ts]`` (1970 to 2100 by default — so epoch milliseconds sent as a
number, which land in the year ~57,970, are rejected rather than misread). Types are strict (no
"1" for 1), extra fields are forbidden, and the size limits come from
:class:`service.config.LimitsSettings`.

:class:`EventDecoder` turns raw message bytes into an event or a :class:`Rejection` whose
``reason`` is one of :data:`REJECT_REASONS` (the ``reason`` label of
``streammom_events_rejected_total`` and the ``dlq.reason`` header).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from service.config import LimitsSettings

__all__ = [
    "REJECT_REASONS",
    "DocumentEvent",
    "EncounterEvent",
    "Event",
    "EventDecoder",
    "Rejection",
    "event_adapter",
    "event_json_schema",
]

#: Every reason a message can be rejected for (dead-lettered), in check order.
REJECT_REASONS: tuple[str, ...] = (
    "oversized",
    "not_utf8",
    "invalid_json",
    "unknown_type",
    "schema",
    "empty",
)

#: The reason for a record the Kafka client itself cannot parse (before any decoding).
UNREADABLE = "unreadable"

_ERROR_TEXT_MAX = 512


# RFC 3339 section 5.6 date-time (ASCII digits; "T"/"Z" in either case, or a space between
# date and time, as its note allows). Python's fromisoformat alone would also take ISO 8601
# forms RFC 3339 excludes (no seconds, "+0100", "+01", decimal comma, week dates).
_RFC3339_LOCAL = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
_RFC3339_OFFSET = r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
_RFC3339 = re.compile(_RFC3339_LOCAL + _RFC3339_OFFSET)
_RFC3339_NO_OFFSET = re.compile(_RFC3339_LOCAL)
_TS_HELP = ("ts must be an RFC 3339 timestamp with offset (e.g. 2026-01-02T03:04:05Z) or a JSON "
            "number of epoch seconds")


def _iso(ts: float) -> str:
    """``ts`` (epoch seconds) as an RFC 3339 UTC string, for messages (any float is safe)."""
    try:
        return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return f"{ts:g} epoch seconds"


def _parse_rfc3339(value: Any) -> Any:
    """Parse a ``ts`` string as an RFC 3339 date-time with offset, here rather than in
    pydantic's datetime parser, which would read ``"1767225600"`` as seconds and
    ``"1767225600000"`` as milliseconds. Numbers pass through unchanged."""
    if not isinstance(value, str):
        return value
    if _RFC3339_NO_OFFSET.fullmatch(value):
        raise ValueError(f"{_TS_HELP}; {value[:40]!r} has no offset (add Z or +HH:MM)")
    if not _RFC3339.fullmatch(value):
        raise ValueError(f"{_TS_HELP}; got the string {value[:40]!r}")
    try:  # the pattern guarantees an offset, so the result is aware
        return datetime.fromisoformat(value[:-1] + "Z" if value.endswith("z") else value)
    except ValueError:
        raise ValueError(f"{_TS_HELP}; {value[:40]!r} is not a valid date-time") from None


def _epoch_seconds(min_ts: float, max_ts: float) -> Callable[[float | int | datetime], float]:
    """The validator normalising ``ts`` to float epoch seconds within ``[min_ts, max_ts]``.

    Integers are compared before any conversion (a 400-digit integer must be rejected, not
    overflow ``float()``).
    """

    def to_epoch(value: float | int | datetime) -> float:
        if isinstance(value, datetime):
            out = value.timestamp()
        elif isinstance(value, int) and not min_ts <= value <= max_ts:
            out = math.inf
        else:
            out = float(value)
        if not (math.isfinite(out) and min_ts <= out <= max_ts):
            shown = str(value)[:40]
            raise ValueError(
                f"ts {shown} is outside the accepted window {_iso(min_ts)} to {_iso(max_ts)} "
                "(limits.min_ts, limits.max_ts); a number is epoch seconds, not milliseconds"
            )
        return out

    return to_epoch


class _EventBase(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    def features(self) -> list[str] | dict[str, int]:
        """The sparse features of the event (code/token list or token counts)."""
        raise NotImplementedError

    @property
    def key(self) -> str:
        """The entity id, or the event id when there is no entity."""
        entity = getattr(self, "entity_id", None)
        return entity if entity is not None else self.id  # type: ignore[attr-defined]


class EncounterEvent(_EventBase):
    """A patient encounter: a set of diagnosis codes (binary features)."""

    type: Literal["encounter"]
    id: str
    entity_id: str
    ts: float
    codes: list[str]

    def features(self) -> list[str]:
        return self.codes


class DocumentEvent(_EventBase):
    """A document: a token list or a token → count map (exactly one of them)."""

    type: Literal["document"]
    id: str
    entity_id: str | None = None
    ts: float
    tokens: list[str] | None = None
    counts: dict[str, int] | None = None

    def features(self) -> list[str] | dict[str, int]:
        return self.tokens if self.tokens is not None else (self.counts or {})


Event = EncounterEvent | DocumentEvent


def _ts_window_text(lim: LimitsSettings) -> str:
    return f"{_iso(lim.min_ts)} to {_iso(lim.max_ts)} (limits.min_ts, limits.max_ts)"


def _ts_json_schema(lim: LimitsSettings) -> dict[str, Any]:
    """The JSON Schema of ``ts``: what :func:`_parse_rfc3339` and the window accept."""
    number: dict[str, Any] = {"type": "number", "description": "epoch seconds"}
    if math.isfinite(lim.min_ts):
        number["minimum"] = lim.min_ts
    if math.isfinite(lim.max_ts):
        number["maximum"] = lim.max_ts
    string = {"type": "string", "format": "date-time",
              "pattern": f"^{_RFC3339_LOCAL}{_RFC3339_OFFSET}$"}
    return {
        "anyOf": [number, string],
        "title": "Ts",
        "description": (
            "event time: a JSON number of epoch seconds, or an RFC 3339 date-time string with "
            f"an offset; numeric strings are rejected; accepted times: {_ts_window_text(lim)}"
        ),
    }


@functools.lru_cache(maxsize=16)
def event_adapter(limits: LimitsSettings | None = None) -> TypeAdapter[Any]:
    """A ``TypeAdapter`` for the discriminated event union under ``limits`` (cached).

    The limits are baked into constrained subclasses of :class:`EncounterEvent` and
    :class:`DocumentEvent`, so validation stays on pydantic-core's Rust path.
    """
    lim = limits or LimitsSettings()
    Ident = Annotated[str, StringConstraints(min_length=1, max_length=lim.max_id_length)]
    Code = Annotated[str, StringConstraints(min_length=1, max_length=lim.max_code_length)]
    Count = Annotated[int, Field(ge=0, le=lim.max_count_value)]
    Timestamp = Annotated[
        float | int | AwareDatetime,
        BeforeValidator(_parse_rfc3339),
        AfterValidator(_epoch_seconds(lim.min_ts, lim.max_ts)),
        WithJsonSchema(_ts_json_schema(lim)),
    ]

    class Encounter(EncounterEvent):
        model_config = ConfigDict(title="EncounterEvent")
        id: Ident
        entity_id: Ident
        ts: Timestamp
        codes: Annotated[list[Code], Field(max_length=lim.max_codes)]

    class Document(DocumentEvent):
        model_config = ConfigDict(title="DocumentEvent")
        id: Ident
        entity_id: Ident | None = None
        ts: Timestamp
        tokens: Annotated[list[Code], Field(max_length=lim.max_tokens)] | None = None
        counts: Annotated[dict[Code, Count], Field(max_length=lim.max_distinct_counts)] | None = (
            None
        )

        @model_validator(mode="after")
        def _exactly_one(self) -> Document:
            if (self.tokens is None) == (self.counts is None):
                raise ValueError("a document needs exactly one of 'tokens' or 'counts'")
            return self

    union = Annotated[Encounter | Document, Field(discriminator="type")]
    return TypeAdapter(union)


def event_json_schema(limits: LimitsSettings | None = None) -> dict[str, Any]:
    """JSON Schema of the accepted events (what ``streammom schema`` prints)."""
    schema = event_adapter(limits).json_schema()
    schema["title"] = "streammom event"
    lim = limits or LimitsSettings()
    schema["description"] = (
        "One input event (a JSON object per Kafka message or JSONL line). 'ts' is an "
        "RFC 3339 date-time string with an offset (e.g. 2026-01-02T03:04:05Z) or a JSON "
        "number of epoch seconds; a numeric string (\"1767225600\") is rejected, and so is "
        f"any time outside {_ts_window_text(lim)}, such as epoch milliseconds."
    )
    return schema


@dataclass(frozen=True)
class Rejection:
    """Why a message was rejected: ``reason`` (a :data:`REJECT_REASONS` member) and details."""

    reason: str
    error: str


def _classify(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    types = {e["type"] for e in errors}
    if "json_invalid" in types or "json_type" in types:
        return "invalid_json"
    if "union_tag_invalid" in types:
        return "unknown_type"
    if any(t == "too_long" for t in types):
        return "oversized"
    return "schema"


class EventDecoder:
    """Decode raw message bytes into validated events, classifying every failure.

    Check order: size (``oversized``), UTF-8 (``not_utf8``), JSON + schema via
    ``TypeAdapter.validate_json`` (``invalid_json``, ``unknown_type``, ``schema``, and
    ``oversized`` for too many codes/tokens/counts), then emptiness (``empty``: no codes,
    no tokens, or all counts zero).
    """

    def __init__(self, limits: LimitsSettings | None = None) -> None:
        self.limits = limits or LimitsSettings()
        self._adapter = event_adapter(self.limits)
        self._max_bytes = self.limits.max_message_bytes

    def decode(self, raw: bytes | None) -> Event | Rejection:
        """One message → an event or a :class:`Rejection`."""
        if not raw:
            return Rejection("empty", "message has no value (tombstone or zero bytes)")
        if len(raw) > self._max_bytes:
            return Rejection("oversized", f"message is {len(raw)} bytes > {self._max_bytes}")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Rejection("not_utf8", str(exc)[:_ERROR_TEXT_MAX])
        try:
            event = self._adapter.validate_json(raw)
            empty = not event.features() or (
                event.type == "document"
                and event.counts is not None
                and not any(event.counts.values())
            )
        except ValidationError as exc:
            reason = _classify(exc)
            return Rejection(reason, _summarise(exc))
        except Exception as exc:  # one message must never stop the loop: dead-letter it
            return Rejection("schema", f"{type(exc).__name__}: {exc}"[:_ERROR_TEXT_MAX])
        if empty:
            return Rejection("empty", f"event {event.id!r} has no features")
        return event

    def decode_many(self, raws: list[bytes | None]) -> list[Event | Rejection]:
        """Decode a batch (JSON decoding is inherently per message)."""
        decode = self.decode
        return [decode(r) for r in raws]


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)[:_ERROR_TEXT_MAX]


def dumps_event(event: Event) -> str:
    """Canonical JSON of an event (used by the file sinks and the sample producer)."""
    return json.dumps(event.model_dump(exclude_none=True), separators=(",", ":"))
