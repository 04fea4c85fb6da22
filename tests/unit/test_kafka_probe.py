"""``KafkaSource.connected()`` sees a frozen broker (issue #12 item 4): a group heartbeat in
flight without a response for ``broker_probe_timeout_ms`` means "down", even though the
coordinator connection still counts as connected. kafka-python's coordinator is faked here;
``tests/integration/test_broker_frozen.py`` freezes a real broker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import service.kafka_source as ksource
from service.config import KafkaSettings


class _Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def _consumer(*, sent: float, received: float, enabled: bool = True) -> Any:
    """kafka-python 3.0.x shapes: ``_coordinator.heartbeat.last_send/last_receive``, the
    coordinator id, and ``_client.connected(node)`` (still True for a SIGSTOPped broker)."""
    beat = SimpleNamespace(last_send=sent, last_receive=received)
    coordinator = SimpleNamespace(coordinator_id=1, heartbeat=beat, _heartbeat_enabled=enabled)
    return SimpleNamespace(_coordinator=coordinator,
                           _client=SimpleNamespace(connected=lambda node: True))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(ksource, "time", SimpleNamespace(monotonic=clock.monotonic))
    return clock


def _source(consumer: Any, timeout_ms: int | None = None) -> ksource.KafkaSource:
    """A source whose consumer is ``consumer`` (default ``broker_probe_timeout_ms``: 5 s)."""
    cfg = KafkaSettings() if timeout_ms is None else KafkaSettings(
        broker_probe_timeout_ms=timeout_ms)
    source = ksource.KafkaSource(cfg, "events")
    source._consumer = consumer
    return source


def test_unanswered_heartbeat_marks_the_broker_down_and_recovers(clock: _Clock) -> None:
    consumer = _consumer(sent=clock.now - 0.2, received=clock.now - 0.1)
    source = _source(consumer)
    assert source.connected()

    beat = consumer._coordinator.heartbeat
    beat.last_send = clock.now  # a heartbeat goes out; the broker is frozen from here on
    clock.now += 4.0
    assert source.connected(), "4 s < broker_probe_timeout_ms: still up"
    clock.now += 1.5
    assert source.connected(), "1 s grace before readiness drops (no flapping)"
    clock.now += 1.0
    assert not source.connected(), "coordinator 'connected' but 6.5 s without an answer"
    assert "no response to a group heartbeat for 6.5 s" in str(source.probe_error)

    beat.last_receive = clock.now  # SIGCONT: the response arrives
    clock.now += 0.1
    assert source.connected() and source.probe_error is None


def test_probe_timeout_is_configurable(clock: _Clock) -> None:
    source = _source(_consumer(sent=clock.now - 3.0, received=clock.now - 4.0), timeout_ms=2000)
    source.connected()
    clock.now += 1.1
    assert not source.connected()


def test_no_opinion_while_heartbeats_are_disabled_or_unknown(clock: _Clock) -> None:
    # a rebalance disables heartbeats (partitions are revoked: readiness is down anyway)
    stale = _consumer(sent=clock.now - 60.0, received=clock.now - 61.0, enabled=False)
    source = _source(stale)
    source.connected()
    clock.now += 2.0
    assert source.connected()
    # another kafka-python version without this state: the connection state alone decides
    other = SimpleNamespace(_coordinator=SimpleNamespace(coordinator_id=1),
                            _client=SimpleNamespace(connected=lambda node: True))
    assert _source(other).connected()


def test_disconnected_coordinator_still_reported(clock: _Clock) -> None:
    consumer = _consumer(sent=clock.now - 0.2, received=clock.now - 0.1)
    consumer._client = SimpleNamespace(connected=lambda node: False)
    source = _source(consumer)
    source.connected()
    clock.now += 1.1
    assert not source.connected()
    assert "not connected to the group coordinator" in str(source.probe_error)
