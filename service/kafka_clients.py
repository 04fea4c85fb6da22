"""Kafka clients: security settings, login failures, topic creation (kafka-python 3.0.x).

Every kafka-python error surfaces as :class:`service.transport.TransportError` (retried by the
worker with backoff). Security settings (TLS files, SASL PLAIN/SCRAM/OAUTHBEARER) reach every
client the same way (:func:`client_security_kwargs`). A rejected login is
:class:`AuthenticationError` (a ``TransportError`` too): kafka-python only logs it and retries
until its bootstrap times out with a bare ``KafkaTimeoutError``, so every client is built with a
``kafka_client`` factory that watches its connections' outcomes (:class:`AuthWatch`).

* :func:`ensure_topics` — create missing topics (the models topic compacted);
  :func:`verify_connection` — one bootstrap round trip (start-up check of address/credentials).

The source and the sink are :mod:`service.kafka_source` and :mod:`service.kafka_sink`; these
three are the only modules importing kafka-python.
"""

from __future__ import annotations

import logging
import ssl
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient
from kafka import errors as kerrors

from service.config import KafkaSettings, TopicsSettings
from service.transport import (
    TransportError,
)

try:  # kafka-python 3.0.x
    from kafka.net.compat import KafkaNetClient as _NetClient
except ImportError:  # another client version: no connection watching (errors stay generic)
    _NetClient = None
try:
    from kafka.net.sasl.oauth import AbstractTokenProvider
except ImportError:  # kafka-python 2.x
    from kafka.sasl.oauth import AbstractTokenProvider  # type: ignore[no-redef]

__all__ = [
    "AuthWatch",
    "AuthenticationError",
    "TokenFileProvider",
    "build_client",
    "client_security_kwargs",
    "ensure_topics",
    "is_authentication_error",
    "verify_connection",
]

_log = logging.getLogger("streammom.kafka")

# Failures that retrying with the same settings cannot fix: the broker rejected the login, or
# the TLS peer's certificate did not verify.
_AUTH_ERRORS: tuple[type[BaseException], ...] = (
    kerrors.SaslAuthenticationFailedError,
    kerrors.UnsupportedSaslMechanismError,
    kerrors.IllegalSaslStateError,
    *(getattr(kerrors, name) for name in ("AuthenticationFailedError",)
      if isinstance(getattr(kerrors, name, None), type)),
    ssl.SSLCertVerificationError,
)


class AuthenticationError(TransportError):
    """The broker rejected the credentials (SASL) or the TLS handshake failed verification.

    Still a :class:`TransportError` (callers that only retry keep working), but retrying with
    the same settings cannot succeed: start-up exits with code 2, the running worker logs an
    error. ``authentication_failed`` is the duck-typed marker the transport-agnostic worker
    checks.
    """

    authentication_failed = True


def is_authentication_error(exc: BaseException | None) -> bool:
    """True if ``exc`` (or an exception it was raised from) is an authentication failure."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, (AuthenticationError, *_AUTH_ERRORS)):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class TokenFileProvider(AbstractTokenProvider):  # type: ignore[misc]
    """OAUTHBEARER token provider: the token is the content of ``path``, read again at every
    (re)authentication, so a sidecar or a projected volume can rotate it without a restart."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)

    def token(self) -> str:
        """The current access token (surrounding whitespace stripped)."""
        token = self.path.read_text(encoding="utf-8").strip()
        if not token:
            raise ValueError(f"OAUTHBEARER token file is empty: {self.path}")
        return token

    def __repr__(self) -> str:
        return f"TokenFileProvider({str(self.path)!r})"


def client_security_kwargs(cfg: KafkaSettings) -> dict[str, Any]:
    """The kafka-python keyword arguments of the security settings (same for every client).

    TLS options only with ``SSL``/``SASL_SSL``; user/password only for PLAIN/SCRAM; OAUTHBEARER
    gets a :class:`TokenFileProvider` (config validation guarantees the combinations).
    """
    out: dict[str, Any] = {"security_protocol": cfg.security_protocol}
    if cfg.security_protocol in ("SSL", "SASL_SSL"):
        out["ssl_check_hostname"] = cfg.ssl_check_hostname
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(cfg, name)
            if path is not None:
                out[name] = str(path)
        if cfg.ssl_password is not None:
            out["ssl_password"] = cfg.ssl_password.get_secret_value()
    if cfg.sasl_mechanism:
        out["sasl_mechanism"] = cfg.sasl_mechanism
        if cfg.sasl_mechanism == "OAUTHBEARER":
            if cfg.sasl_oauth_token_file is not None:
                out["sasl_oauth_token_provider"] = TokenFileProvider(cfg.sasl_oauth_token_file)
        else:
            out["sasl_plain_username"] = cfg.sasl_username
            out["sasl_plain_password"] = (
                cfg.sasl_password.get_secret_value() if cfg.sasl_password is not None else None
            )
    return out


class AuthWatch:
    """Remembers the latest authentication failure of the connections of the clients built
    through :meth:`client_factory` (kafka-python's documented ``kafka_client`` option).

    kafka-python 3 only logs a rejected login and retries until the bootstrap times out, so
    the failure is taken from each connection's ``init_future``; a connection that initialises
    successfully clears it. It also keeps the clients it built, so a constructor that failed
    can be closed (kafka-python leaves its IO thread running otherwise). Private kafka-python
    attributes are guarded: another client version just gives no opinion.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failure: BaseException | None = None
        self._clients: weakref.WeakSet[Any] = weakref.WeakSet()

    def reset(self) -> None:
        """Forget an earlier failure (before a new construction attempt)."""
        with self._lock:
            self.failure = None

    def observe(self, exc: BaseException) -> None:
        """Record ``exc`` if it is an authentication failure (other errors say nothing)."""
        if is_authentication_error(exc):
            with self._lock:
                self.failure = exc

    def _succeeded(self, _value: Any) -> None:
        with self._lock:
            self.failure = None

    def client_kwargs(self) -> dict[str, Any]:
        """``{"kafka_client": factory}`` for a kafka-python constructor, or ``{}``."""
        return {} if _NetClient is None else {"kafka_client": self.client_factory}

    def client_factory(self, **configs: Any) -> Any:
        """Build the kafka-python network client and watch its connections."""
        assert _NetClient is not None
        client = _NetClient(**configs)
        self._clients.add(client)
        manager = getattr(client, "_manager", None)
        get_connection = getattr(manager, "get_connection", None)
        if get_connection is None:
            return client
        watched: weakref.WeakSet[Any] = weakref.WeakSet()

        def watching_get_connection(*args: Any, **kwargs: Any) -> Any:
            try:
                conn = get_connection(*args, **kwargs)
            except Exception as exc:  # e.g. kafka-python re-raising a cached auth failure
                self.observe(exc)
                raise
            try:
                if conn not in watched:
                    watched.add(conn)
                    future = conn.init_future
                    future.add_errback(self.observe)
                    future.add_callback(self._succeeded)
            except (AttributeError, TypeError):  # another client version: no opinion
                pass
            return conn

        manager.get_connection = watching_get_connection
        return client

    def close_clients(self) -> None:
        """Close the network clients built so far (after a failed constructor)."""
        for client in list(self._clients):
            try:
                client.close()
            except Exception as exc:  # best effort
                _log.debug("client close failed", extra={"error": repr(exc)})
        self._clients = weakref.WeakSet()

    def error(self, what: str, exc: BaseException) -> TransportError:
        """``exc`` (a failed client call) as :class:`AuthenticationError` if a login was
        rejected meanwhile, else as a plain :class:`TransportError`."""
        failure = self.failure or (exc if is_authentication_error(exc) else None)
        if failure is not None:
            return AuthenticationError(f"{what}: authentication failed: {failure!r}")
        return TransportError(f"{what}: {exc!r}")


def build_client(
    what: str, factory: Callable[..., Any], watch: AuthWatch, cfg: KafkaSettings,
    **kwargs: Any,
) -> Any:
    """``factory(**kwargs, security, kafka_client)``; a failure → :meth:`AuthWatch.error`."""
    watch.reset()
    try:
        return factory(**kwargs, **client_security_kwargs(cfg), **watch.client_kwargs())
    except kerrors.KafkaError as exc:
        watch.close_clients()
        raise watch.error(what, exc) from exc


def ensure_topics(cfg: KafkaSettings, topics: TopicsSettings, *, scale_out: bool = False
                  ) -> list[str]:
    """Create the missing input/output topics; the models topic with ``cleanup.policy=compact``;
    with ``scale_out`` (roles ingest/learner) also the frames topic (one partition) and the
    compacted learner-state topic.

    Returns the names created. Raises :class:`TransportError` when the broker is unreachable,
    :class:`AuthenticationError` when it rejects the credentials.
    """
    watch = AuthWatch()
    admin = _admin(cfg, watch)
    try:
        existing = set(admin.list_topics())
        wanted: dict[str, dict[str, Any]] = {}
        for name in (topics.input, topics.assignments, topics.dead_letters):
            wanted[name] = {
                "num_partitions": cfg.topic_partitions,
                "replication_factor": cfg.replication_factor,
            }
        wanted[topics.models] = {
            "num_partitions": 1,
            "replication_factor": cfg.replication_factor,
            "configs": {"cleanup.policy": "compact"},
        }
        if scale_out:
            wanted[topics.frames] = {"num_partitions": 1,
                                     "replication_factor": cfg.replication_factor}
            wanted[topics.learner_state] = dict(wanted[topics.models])
        missing = {k: v for k, v in wanted.items() if k not in existing}
        if missing:
            admin.create_topics(missing, raise_errors=False, wait_for_metadata=True)
            _log.info("created topics", extra={"topics": sorted(missing)})
        return sorted(missing)
    except kerrors.KafkaError as exc:
        raise watch.error("ensure topics", exc) from exc
    finally:
        admin.close()


def _admin(cfg: KafkaSettings, watch: AuthWatch) -> Any:
    return build_client(
        "admin client",
        KafkaAdminClient,
        watch,
        cfg,
        bootstrap_servers=cfg.bootstrap_servers,
        client_id=f"{cfg.client_id}-admin",
        request_timeout_ms=cfg.request_timeout_ms,
        bootstrap_timeout_ms=cfg.max_block_ms,
    )


def verify_connection(cfg: KafkaSettings) -> None:
    """Bootstrap an admin client once (bounded by ``max_block_ms``) and close it: a start-up
    check that the brokers answer and accept the credentials.

    Raises :class:`AuthenticationError` if a login was rejected, :class:`TransportError` if
    the brokers could not be reached.
    """
    _admin(cfg, AuthWatch()).close()
