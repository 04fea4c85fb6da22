"""The dev broker's optional SASL_PLAINTEXT/PLAIN listener (server.properties only, no JVM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.devbroker.broker import KafkaBroker, sasl_plain_properties, server_properties


def test_sasl_listener_properties(tmp_path: Path) -> None:
    extra = sasl_plain_properties(port=1234, sasl_port=1236, controller_port=1235,
                                  users={"alice": "a-pw", "bob": "b-pw"})
    props = server_properties(port=1234, controller_port=1235, log_dir=tmp_path,
                              overrides=extra)
    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:1234,SASL_PLAINTEXT://127.0.0.1:1236,"
                                  "CONTROLLER://127.0.0.1:1235")
    assert props["advertised.listeners"] == (
        "PLAINTEXT://127.0.0.1:1234,SASL_PLAINTEXT://127.0.0.1:1236")
    assert "SASL_PLAINTEXT:SASL_PLAINTEXT" in props["listener.security.protocol.map"]
    assert props["inter.broker.listener.name"] == "PLAINTEXT"  # unchanged: no inter-broker SASL
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    assert props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="a-pw" user_bob="b-pw";')


@pytest.mark.parametrize("users", [{}, {"a": 'pw"x'}, {"a": "p;w"}, {"a b": "pw"}, {"": "pw"}])
def test_sasl_users_that_would_need_quoting_are_rejected(users: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        sasl_plain_properties(port=1, sasl_port=2, controller_port=3, users=users)


def test_sasl_bootstrap_needs_sasl_users() -> None:
    from service.devbroker import BrokerError

    with pytest.raises(BrokerError, match="without sasl_plain_users"):
        _ = KafkaBroker().sasl_bootstrap
    with pytest.raises(BrokerError, match="never started"):
        _ = KafkaBroker(sasl_plain_users={"a": "b"}).sasl_bootstrap
