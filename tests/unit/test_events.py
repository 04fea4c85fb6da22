"""Event validation: every accepted shape and every dead-letter reason."""

from __future__ import annotations

import json

import pytest

from service.config import LimitsSettings
from service.events import (
    REJECT_REASONS,
    DocumentEvent,
    EncounterEvent,
    EventDecoder,
    Rejection,
    event_json_schema,
)
from service.synthetic import malformed_samples


def _enc(**kw: object) -> bytes:
    ev = {"type": "encounter", "id": "e1", "entity_id": "p1", "ts": 10.5, "codes": ["I10"]}
    ev.update(kw)
    return json.dumps(ev).encode()


def _doc(**kw: object) -> bytes:
    ev: dict[str, object] = {"type": "document", "id": "d1", "ts": 1}
    ev.update(kw)
    return json.dumps(ev).encode()


@pytest.fixture
def decoder() -> EventDecoder:
    return EventDecoder(LimitsSettings(max_codes=8, max_tokens=8, max_distinct_counts=3,
                                       max_code_length=10, max_message_bytes=2048))


def test_valid_encounter_and_rfc3339(decoder: EventDecoder) -> None:
    ev = decoder.decode(_enc(ts="2026-01-01T00:00:00+01:00"))
    assert isinstance(ev, EncounterEvent)
    assert ev.ts == pytest.approx(1767222000.0)
    assert ev.key == "p1" and ev.features() == ["I10"]


def test_valid_documents(decoder: EventDecoder) -> None:
    tok = decoder.decode(_doc(tokens=["a", "b"]))
    cnt = decoder.decode(_doc(counts={"a": 2, "b": 0}, entity_id="u"))
    assert isinstance(tok, DocumentEvent) and tok.key == "d1" and tok.ts == 1.0
    assert isinstance(cnt, DocumentEvent) and cnt.features() == {"a": 2, "b": 0}
    assert cnt.key == "u"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe", "not_utf8"),
        (b'{"type": "encounter",', "invalid_json"),
        (b"", "empty"),
        (b"   ", "invalid_json"),
        (b'{"type": "lab", "id": "x"}', "unknown_type"),
        (b'{"id": "x"}', "schema"),
        (b"[1, 2]", "schema"),
        (b"null", "schema"),
        (None, "empty"),
    ],
)
def test_reasons_raw(decoder: EventDecoder, raw: bytes | None, reason: str) -> None:
    out = decoder.decode(raw)
    assert isinstance(out, Rejection) and out.reason == reason, out


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"ts": "yesterday"}, "schema"),
        ({"ts": "2026-01-01T00:00:00"}, "schema"),  # RFC 3339 needs an offset
        ({"ts": True}, "schema"),  # strict: no bool for a number
        ({"ts": -1}, "schema"),
        ({"id": 5}, "schema"),  # strict: no int for a string
        ({"id": ""}, "schema"),
        ({"extra": 1}, "schema"),  # extra fields forbidden
        ({"codes": "I10"}, "schema"),
        ({"codes": ["X" * 11]}, "schema"),  # code longer than max_code_length
        ({"codes": []}, "empty"),
        ({"codes": ["I10"] * 9}, "oversized"),  # more than max_codes
        ({"codes": ["I10"] * 400}, "oversized"),  # more than max_message_bytes
    ],
)
def test_reasons_encounter(decoder: EventDecoder, kw: dict[str, object], reason: str) -> None:
    out = decoder.decode(_enc(**kw))
    assert isinstance(out, Rejection) and out.reason == reason, out


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({}, "schema"),  # neither tokens nor counts
        ({"tokens": ["a"], "counts": {"a": 1}}, "schema"),  # both
        ({"tokens": []}, "empty"),
        ({"counts": {}}, "empty"),
        ({"counts": {"a": 0}}, "empty"),
        ({"counts": {"a": -1}}, "schema"),
        ({"counts": {"a": 1.5}}, "schema"),
        ({"counts": {"a": 1, "b": 1, "c": 1, "d": 1}}, "oversized"),
        ({"tokens": ["a"] * 9}, "oversized"),
    ],
)
def test_reasons_document(decoder: EventDecoder, kw: dict[str, object], reason: str) -> None:
    out = decoder.decode(_doc(**kw))
    assert isinstance(out, Rejection) and out.reason == reason, out


def test_malformed_samples_cover_every_reason() -> None:
    decoder = EventDecoder()
    seen = set()
    for reason, raw in malformed_samples():
        out = decoder.decode(raw)
        assert isinstance(out, Rejection) and out.reason == reason, (reason, out)
        seen.add(reason)
    assert seen == set(REJECT_REASONS)


def test_decode_many_keeps_order(decoder: EventDecoder) -> None:
    out = decoder.decode_many([_enc(id="a"), b"{", _enc(id="b")])
    assert [getattr(o, "id", None) or o.reason for o in out] == ["a", "invalid_json", "b"]


def test_schema_reflects_limits() -> None:
    schema = event_json_schema(LimitsSettings(max_codes=7))
    text = json.dumps(schema)
    assert '"maxItems": 7' in text
    assert schema["discriminator"]["propertyName"] == "type" or "oneOf" in schema


# ------------------------------------------------------------------ ts: one documented rule
@pytest.mark.parametrize(
    "ts",
    [
        "2026-01-01T00:00Z",               # no seconds
        "2026-01-01T00:00:00+0100",        # offset without a colon
        "2026-01-01T00:00:00+01",          # offset without minutes
        "2026-01-01T00:00:00+01:00:30",    # offset with seconds
        "2026-01-01T00:00:00,5Z",          # decimal comma
        "2026-01-01T00:00:00.Z",           # empty fraction
        "2026-01-01T00:00:00 Z",           # space before the offset
        "20260101T000000Z",                # ISO 8601 basic format
        "2026-W01-1T00:00:00Z",            # ISO week date
        "2026-01-01T00:00:00Z ",           # trailing blank
    ],
)
def test_ts_strings_must_be_rfc3339(decoder: EventDecoder, ts: str) -> None:
    """Only RFC 3339 date-times: the looser ISO 8601 forms ``fromisoformat`` takes are not."""
    out = decoder.decode(_enc(ts=ts))
    assert isinstance(out, Rejection) and out.reason == "schema", out
    assert "RFC 3339" in out.error


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        ("2026-01-01T00:00:00Z", 1767225600.0),
        ("2026-01-01t00:00:00z", 1767225600.0),            # RFC 3339 5.6: case-insensitive
        ("2026-01-01 00:00:00Z", 1767225600.0),            # RFC 3339 5.6 note: a space
        ("2026-01-01T01:30:00+01:30", 1767225600.0),
        ("2025-12-31T23:00:00-01:00", 1767225600.0),
        ("2026-01-01T00:00:00-00:00", 1767225600.0),       # unknown local offset
        ("2026-01-01T00:00:00.5Z", 1767225600.5),
        ("2026-01-01T00:00:00.123456789Z", 1767225600.123456),  # > 6 digits: truncated
    ],
)
def test_rfc3339_forms(decoder: EventDecoder, ts: str, expected: float) -> None:
    ev = decoder.decode(_enc(ts=ts))
    assert isinstance(ev, EncounterEvent), ev
    assert ev.ts == pytest.approx(expected, abs=1e-6)


def test_ts_window_error_names_the_configured_dates() -> None:
    """The error says which window applies, as dates, and that ts is in seconds."""
    limits = LimitsSettings(min_ts=1_700_000_000, max_ts=1_800_000_000)
    out = EventDecoder(limits).decode(_enc(ts=1_700_000_000_000))
    assert isinstance(out, Rejection) and out.reason == "schema", out
    assert "2023-11-14T22:13:20Z" in out.error and "2027-01-15T08:00:00Z" in out.error
    assert "seconds, not milliseconds" in out.error
    # an open window (max_ts = inf) is a valid setting and still rejects nothing in range
    wide = EventDecoder(LimitsSettings(max_ts=float("inf")))
    assert isinstance(wide.decode(_enc(ts=1e12)), EncounterEvent)
    assert wide.decode(_enc(ts=-1)).reason == "schema"  # type: ignore[union-attr]


def test_schema_documents_the_ts_rule() -> None:
    """``streammom schema`` shows the configured window and the accepted ts forms."""
    limits = LimitsSettings(min_ts=1_700_000_000, max_ts=1_800_000_000)
    schema = event_json_schema(limits)
    assert "2023-11-14T22:13:20Z" in schema["description"]
    assert "2027-01-15T08:00:00Z" in schema["description"]
    assert "numeric string" in schema["description"]
    for definition in schema["$defs"].values():
        ts = definition["properties"]["ts"]
        number = next(s for s in ts["anyOf"] if s.get("type") == "number")
        string = next(s for s in ts["anyOf"] if s.get("type") == "string")
        assert number["minimum"] == 1_700_000_000 and number["maximum"] == 1_800_000_000
        assert string["format"] == "date-time"
        assert "seconds" in ts["description"]
        assert not any(s.get("type") == "integer" for s in ts["anyOf"])  # "number" covers it
