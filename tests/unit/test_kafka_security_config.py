"""Kafka security settings (issue #12 item 11): validation at config load, the keyword
arguments every kafka-python client gets, OAUTHBEARER token files, and how a rejected login is
classified and logged (no broker needed: the kafka-python classes are replaced by recorders)."""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import errors as kerrors

import service.kafka_clients as kt
import service.kafka_sink as ksink
import service.kafka_source as ksource
from service.commands.produce import produce_sample
from service.config import (
    ConfigError,
    KafkaSettings,
    Settings,
    TopicsSettings,
    dump_settings,
    load_settings,
)
from service.memory_transport import MemoryBroker, MemorySink, MemorySource
from service.metrics import WorkerMetrics
from service.transport import TransportError
from service.worker import Worker


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, Path]:
    """Existing (dummy) TLS files: validation only checks that they exist."""
    out = {}
    for name in ("ca", "cert", "key"):
        path = tmp_path / f"{name}.pem"
        path.write_text("-----BEGIN DUMMY-----\n")
        out[name] = path
    return out


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("kafka", "message"),
    [
        ({"sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p"},
         "sasl_mechanism PLAIN needs security_protocol SASL_PLAINTEXT or SASL_SSL"),
        ({"security_protocol": "SASL_SSL"}, "security_protocol SASL_SSL needs sasl_mechanism"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
          "sasl_username": "u"}, "sasl_mechanism PLAIN needs sasl_username and sasl_password"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
          "sasl_password": "p"}, "SCRAM-SHA-512 needs sasl_username and sasl_password"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
          "sasl_username": "u", "sasl_password": ""}, "needs sasl_username and sasl_password"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
         "OAUTHBEARER needs sasl_oauth_token_file"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER",
          "sasl_oauth_token_file": "/nonexistent/token"},
         "sasl_oauth_token_file: no such file"),
        ({"sasl_username": "u", "sasl_password": "p"},
         "sasl_username/sasl_password are only used by sasl_mechanism PLAIN"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "sasl_mechanism"),
        ({"ssl_cafile": "{ca}"}, "ssl_cafile need security_protocol SSL or SASL_SSL"),
        ({"security_protocol": "SSL", "ssl_keyfile": "{key}"},
         "ssl_keyfile/ssl_password need ssl_certfile"),
        ({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"},
         "ssl_cafile: no such file"),
        ({"security_protocol": "SSL", "ssl_certfile": "{cert}", "ssl_keyfile": "/nope.pem"},
         "ssl_keyfile: no such file"),
    ],
)
def test_invalid_security_combinations_are_rejected_at_load(
    kafka: dict[str, str], message: str, pem: dict[str, Path]
) -> None:
    values = {k: v.format(**pem) for k, v in kafka.items()}
    with pytest.raises(ConfigError, match=message):
        load_settings(overrides={"kafka": values})


def test_env_settings_are_validated_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMMOM_KAFKA__SASL_MECHANISM", "SCRAM-SHA-256")
    with pytest.raises(ConfigError, match="needs security_protocol SASL_PLAINTEXT"):
        load_settings()


def test_secrets_are_masked_and_mechanism_is_case_insensitive(pem: dict[str, Path]) -> None:
    s = load_settings(overrides={"kafka": {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "scram-sha-512",
        "sasl_username": "svc", "sasl_password": "sasl-secret",
        "ssl_cafile": str(pem["ca"]), "ssl_certfile": str(pem["cert"]),
        "ssl_keyfile": str(pem["key"]), "ssl_password": "key-secret",
    }})
    assert s.kafka.sasl_mechanism == "SCRAM-SHA-512"
    for fmt in ("toml", "json"):
        text = dump_settings(s, fmt)  # type: ignore[arg-type]
        assert "sasl-secret" not in text and "key-secret" not in text
    assert "sasl-secret" not in repr(s.kafka) and "key-secret" not in repr(s.kafka)


# ----------------------------------------------------------------------------- kwargs
def test_sasl_ssl_scram_kwargs(pem: dict[str, Path]) -> None:
    cfg = KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
                        sasl_username="svc", sasl_password="pw", ssl_cafile=pem["ca"],
                        ssl_certfile=pem["cert"], ssl_keyfile=pem["key"], ssl_password="kp",
                        ssl_check_hostname=False)
    assert kt.client_security_kwargs(cfg) == {
        "security_protocol": "SASL_SSL",
        "ssl_check_hostname": False,
        "ssl_cafile": str(pem["ca"]),
        "ssl_certfile": str(pem["cert"]),
        "ssl_keyfile": str(pem["key"]),
        "ssl_password": "kp",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "svc",
        "sasl_plain_password": "pw",
    }


def test_plaintext_and_ssl_only_kwargs(pem: dict[str, Path]) -> None:
    assert kt.client_security_kwargs(KafkaSettings()) == {"security_protocol": "PLAINTEXT"}
    assert kt.client_security_kwargs(
        KafkaSettings(security_protocol="SSL", ssl_cafile=pem["ca"])
    ) == {"security_protocol": "SSL", "ssl_check_hostname": True, "ssl_cafile": str(pem["ca"])}


def test_oauthbearer_token_file_is_reread(tmp_path: Path) -> None:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    token = tmp_path / "token"
    token.write_text("first-token\n")
    cfg = KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
                        sasl_oauth_token_file=token)
    kwargs = kt.client_security_kwargs(cfg)
    provider = kwargs.pop("sasl_oauth_token_provider")
    assert kwargs == {"security_protocol": "SASL_SSL", "ssl_check_hostname": True,
                      "sasl_mechanism": "OAUTHBEARER"}
    assert isinstance(provider, AbstractTokenProvider)  # what kafka-python requires
    assert provider.token() == "first-token"
    token.write_text("rotated-token")
    assert provider.token() == "rotated-token"
    token.write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        provider.token()


class _Recorder:
    """Stands in for a kafka-python client class; records constructor kwargs."""

    def __init__(self, calls: list[tuple[str, dict[str, Any]]], name: str) -> None:
        self.calls, self.name = calls, name

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append((self.name, kwargs))
        return _FakeClient()


class _FakeFuture:
    is_done = True
    exception = None

    def failed(self) -> bool:
        return False


class _FakeClient:
    def list_topics(self) -> list[str]:
        return []

    def create_topics(self, *args: Any, **kwargs: Any) -> None:
        return None

    def subscribe(self, *args: Any, **kwargs: Any) -> None:
        return None

    def poll(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return {}

    def send(self, *args: Any, **kwargs: Any) -> _FakeFuture:
        return _FakeFuture()

    def flush(self, *args: Any, **kwargs: Any) -> None:
        return None

    def close(self, *args: Any, **kwargs: Any) -> None:
        return None


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    for module, cls in ((ksource, "KafkaConsumer"), (ksink, "KafkaProducer"),
                        (kt, "KafkaAdminClient")):
        monkeypatch.setattr(module, cls, _Recorder(calls, cls))
    return calls


def test_every_client_gets_the_security_settings(
    recorded: list[tuple[str, dict[str, Any]]], pem: dict[str, Path]
) -> None:
    cfg = KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
                        sasl_username="svc", sasl_password="pw", ssl_cafile=pem["ca"])
    expected = kt.client_security_kwargs(cfg)
    kt.ensure_topics(cfg, TopicsSettings())
    kt.verify_connection(cfg)
    source = ksource.KafkaSource(cfg, "events")
    source.poll(10, 0.01)
    sink = ksink.KafkaSink(cfg)
    sink.produce("out", b"k", b"v")
    sink.flush(1.0)
    assert sorted(name for name, _ in recorded) == [
        "KafkaAdminClient", "KafkaAdminClient", "KafkaConsumer", "KafkaProducer"]
    for name, kwargs in recorded:
        assert {k: kwargs[k] for k in expected} == expected, name
        assert callable(kwargs["kafka_client"]), name  # the connection watch


def test_produce_sample_uses_the_configured_security(
    recorded: list[tuple[str, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch,
    pem: dict[str, Path],
) -> None:
    for key, value in {"SECURITY_PROTOCOL": "SASL_SSL", "SASL_MECHANISM": "SCRAM-SHA-512",
                       "SASL_USERNAME": "svc", "SASL_PASSWORD": "pw",
                       "SSL_CAFILE": str(pem["ca"])}.items():
        monkeypatch.setenv(f"STREAMMOM_KAFKA__{key}", value)
    assert produce_sample(events=50, topic="t", bootstrap="broker:9093") == 50
    # the first-contact check (admin client) and the producer carry the same security settings
    assert [name for name, _ in recorded] == ["KafkaAdminClient", "KafkaProducer"]
    for _, kwargs in recorded:
        assert kwargs["bootstrap_servers"] == "broker:9093"
        assert kwargs["security_protocol"] == "SASL_SSL"
        assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
        assert kwargs["sasl_plain_username"] == "svc" and kwargs["sasl_plain_password"] == "pw"
        assert kwargs["ssl_cafile"] == str(pem["ca"])


# ----------------------------------------------------------------------------- classification
def test_rejected_login_is_an_authentication_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python ends a bootstrap whose logins were rejected with a bare timeout; the
    connection watch turns it into AuthenticationError (and closes the half-built client)."""
    closed: list[bool] = []

    class NetClient:  # what the kafka_client factory built before the bootstrap gave up
        def close(self) -> None:
            closed.append(True)

    built = NetClient()

    def consumer(**kwargs: Any) -> Any:
        watch = kwargs["kafka_client"].__self__
        watch._clients.add(built)
        watch.observe(kerrors.SaslAuthenticationFailedError("Invalid username or password"))
        raise kerrors.KafkaTimeoutError("Unable to bootstrap from x:9092")

    monkeypatch.setattr(ksource, "KafkaConsumer", consumer)
    cfg = KafkaSettings(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                        sasl_username="u", sasl_password="wrong")
    source = ksource.KafkaSource(cfg, "events")
    with pytest.raises(kt.AuthenticationError, match=r"authentication failed.*Invalid username"):
        source.poll(10, 0.01)
    assert closed == [True]
    assert not source.connected()
    assert isinstance(source.probe_error, kt.AuthenticationError)


def test_unreachable_broker_stays_a_plain_transport_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def admin(**kwargs: Any) -> Any:
        kwargs["kafka_client"].__self__.observe(kerrors.KafkaConnectionError("refused"))
        raise kerrors.KafkaTimeoutError("Unable to bootstrap from x:9092")

    monkeypatch.setattr(kt, "KafkaAdminClient", admin)
    with pytest.raises(TransportError) as info:
        kt.verify_connection(KafkaSettings())
    assert not isinstance(info.value, kt.AuthenticationError)


def test_authentication_errors_are_retried_not_dropped() -> None:
    assert ksink._retriable(kerrors.SaslAuthenticationFailedError("bad"))
    assert ksink._retriable(kt.AuthenticationError("producer: authentication failed"))
    assert not ksink._retriable(kerrors.MessageSizeTooLargeError())


def _worker(tmp_path: Path) -> Worker:
    settings: Settings = load_settings(overrides={
        "checkpoint": {"dir": str(tmp_path / "ckpt")}, "http": {"enabled": False}})
    broker = MemoryBroker()
    broker.create_topic("streammom.events")
    return Worker(settings, MemorySource(broker, "streammom.events"), MemorySink(broker),
                  metrics=WorkerMetrics())


def test_worker_logs_an_authentication_failure_once_as_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    worker = _worker(tmp_path)
    caplog.set_level(logging.INFO, logger="streammom.worker")
    auth = kt.AuthenticationError("consumer: authentication failed: SaslAuthenticationFailed")
    for _ in range(3):  # the loop reports it at every retry; logged once
        worker.broker.report(False, auth)
    worker.broker.report(False, TransportError("poll: timeout"))
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().split(":")[0] for r in errors] == ["authentication failed"]
    assert not [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert worker.readiness()[1]["broker"] is False
    worker.broker.report(True, None)
    worker.broker.report(False, auth)  # a new rejection after a recovery is logged again
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2


# ----------------------------------------------------------------------------- TLS, for real
@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A TLS server on 127.0.0.1 with a self-signed certificate for CN/SAN ``localhost``
    (it completes handshakes, then hangs up: it speaks no Kafka). Yields (port, cert)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed
            with contextlib.suppress(OSError), ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(64)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], cert
    finally:
        server.close()


def test_tls_settings_reach_the_handshake(tls_server: tuple[int, Path]) -> None:
    """An untrusted certificate is an authentication failure, not an outage; with the CA in
    ``ssl_cafile`` (and the host name check off: we dial 127.0.0.1, the name is localhost) the
    handshake passes and what remains is a plain connection problem."""
    port, cert = tls_server
    base = {"bootstrap_servers": f"127.0.0.1:{port}", "security_protocol": "SSL",
            "max_block_ms": 1500}
    with pytest.raises(kt.AuthenticationError, match="CERTIFICATE_VERIFY_FAILED"):
        kt.verify_connection(KafkaSettings(**base))
    with pytest.raises(kt.AuthenticationError, match="CERTIFICATE_VERIFY_FAILED"):
        kt.verify_connection(KafkaSettings(**base, ssl_cafile=cert))  # name mismatch
    with pytest.raises(TransportError) as info:
        kt.verify_connection(KafkaSettings(**base, ssl_cafile=cert, ssl_check_hostname=False))
    assert not isinstance(info.value, kt.AuthenticationError), info.value
