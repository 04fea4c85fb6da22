"""Kafka implementation of the transport port (kafka-python 3.0.x; the only module importing it).

* :class:`KafkaSource` — a ``KafkaConsumer`` in a consumer group, ``enable_auto_commit=False``,
  ``auto_offset_reset="earliest"``. A rebalance listener forwards assignments to the worker,
  which seeks the gained partitions to the offsets its state belongs to (checkpoint offsets after
  a restart). kafka-python 3 runs listeners on its IO thread, so the listener does nothing that
  blocks: ``seek`` only sets a position in the subscription state.
* :class:`KafkaSink` — a ``KafkaProducer`` with ``acks="all"``, idempotence and compression.
  Messages are kept until the broker acknowledged them; failed or unsent ones are re-sent by the
  next :meth:`KafkaSink.flush` (so an outage delays outputs but never drops them).
* :func:`ensure_topics` — create missing topics (the models topic compacted);
  :func:`verify_connection` — one bootstrap round trip (start-up check of address/credentials).

Every kafka-python error surfaces as :class:`service.transport.TransportError` (retried by the
worker with backoff); the client is created lazily and re-created after a failed bootstrap.
Security settings (TLS files, SASL PLAIN/SCRAM/OAUTHBEARER) reach every client the same way
(:func:`client_security_kwargs`). A rejected login is :class:`AuthenticationError` (a
``TransportError`` too): kafka-python only logs it and retries until its bootstrap times out with
a bare ``KafkaTimeoutError``, so every client is built with a ``kafka_client`` factory that
watches its connections' outcomes (:class:`_AuthWatch`).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import errors as kerrors
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTP

from service.config import KafkaSettings, TopicsSettings
from service.transport import (
    AssignCallback,
    Headers,
    Record,
    TopicPartition,
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
    "AuthenticationError",
    "KafkaSink",
    "KafkaSource",
    "TokenFileProvider",
    "client_security_kwargs",
    "ensure_topics",
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


class _AuthWatch:
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


def _build(
    what: str, factory: Callable[..., Any], watch: _AuthWatch, cfg: KafkaSettings,
    **kwargs: Any,
) -> Any:
    """``factory(**kwargs, security, kafka_client)``; a failure → :meth:`_AuthWatch.error`."""
    watch.reset()
    try:
        return factory(**kwargs, **client_security_kwargs(cfg), **watch.client_kwargs())
    except kerrors.KafkaError as exc:
        watch.close_clients()
        raise watch.error(what, exc) from exc


def ensure_topics(cfg: KafkaSettings, topics: TopicsSettings) -> list[str]:
    """Create the missing input/output topics; the models topic with ``cleanup.policy=compact``.

    Returns the names created. Raises :class:`TransportError` when the broker is unreachable,
    :class:`AuthenticationError` when it rejects the credentials.
    """
    watch = _AuthWatch()
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
        missing = {k: v for k, v in wanted.items() if k not in existing}
        if missing:
            admin.create_topics(missing, raise_errors=False, wait_for_metadata=True)
            _log.info("created topics", extra={"topics": sorted(missing)})
        return sorted(missing)
    except kerrors.KafkaError as exc:
        raise watch.error("ensure topics", exc) from exc
    finally:
        admin.close()


def _admin(cfg: KafkaSettings, watch: _AuthWatch) -> Any:
    return _build(
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
    _admin(cfg, _AuthWatch()).close()


class _Listener(ConsumerRebalanceListener):
    """Forwards rebalances to the source's callbacks. Runs on kafka-python's IO thread."""

    def __init__(self, source: KafkaSource) -> None:
        self._source = source

    def on_partitions_revoked(self, revoked: Any) -> None:
        tps = sorted((tp.topic, tp.partition) for tp in revoked)
        self._source._on_revoked(tps)

    def on_partitions_assigned(self, assigned: Any) -> None:
        tps = sorted((tp.topic, tp.partition) for tp in assigned)
        self._source._on_assigned(tps)


class KafkaSource:
    """Consume ``topic`` in consumer group ``cfg.group_id`` (see the module docstring)."""

    def __init__(self, cfg: KafkaSettings, topic: str, *, max_poll_records: int = 2000) -> None:
        self.cfg = cfg
        self.topic = topic
        self.max_poll_records = max_poll_records
        self.on_assign: AssignCallback | None = None
        self.on_revoke: AssignCallback | None = None
        self._consumer: KafkaConsumer | None = None
        self._assigned: set[TopicPartition] = set()
        self._assigned_lock = threading.Lock()  # mutated on the IO thread, read by /readyz
        self._positions: dict[TopicPartition, int] = {}
        self._closed = False
        self._last_commit: dict[Any, Any] | None = None
        self._down_since: float | None = None
        self._commit_error: BaseException | None = None
        self._probe_timeout_s = cfg.broker_probe_timeout_ms / 1000
        self._auth = _AuthWatch()
        self.probe_error: TransportError | None = None  # why connected() is False (the log)

    # -------------------------------------------------------------- lifecycle
    def _ensure(self) -> KafkaConsumer:
        if self._consumer is not None:
            return self._consumer
        cfg = self.cfg
        consumer = _build(
            "consumer",
            KafkaConsumer,
            self._auth,
            cfg,
            bootstrap_servers=cfg.bootstrap_servers,
            group_id=cfg.group_id,
            group_instance_id=cfg.group_instance_id,
            client_id=cfg.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            max_poll_interval_ms=cfg.max_poll_interval_ms,
            request_timeout_ms=max(cfg.request_timeout_ms, cfg.session_timeout_ms + 1000),
            max_poll_records=self.max_poll_records,
            bootstrap_timeout_ms=cfg.max_block_ms,
            reconnect_backoff_max_ms=2000,
        )
        try:
            consumer.subscribe([self.topic], listener=_Listener(self))
        except kerrors.KafkaError as exc:
            consumer.close(autocommit=False)
            raise TransportError(f"consumer: {exc!r}") from exc
        self._consumer = consumer
        return consumer

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._consumer is not None:
            if self._last_commit:
                mine = {tp: om for tp, om in self._last_commit.items()
                        if (tp.topic, tp.partition) in self._assigned}
                try:
                    if mine:
                        self._consumer.commit(offsets=mine, timeout_ms=5000)
                except Exception as exc:  # advisory: the checkpoint holds the offsets
                    _log.warning("final commit failed", extra={"error": repr(exc)})
            try:
                self._consumer.close(autocommit=False, timeout_ms=5000)
            except Exception as exc:
                _log.warning("consumer close failed", extra={"error": repr(exc)})

    # -------------------------------------------------------------- rebalance (IO thread)
    def _on_assigned(self, tps: list[TopicPartition]) -> None:
        with self._assigned_lock:
            self._assigned.update(tps)
        if self.on_assign is not None:
            self.on_assign(tps)

    def _on_revoked(self, tps: list[TopicPartition]) -> None:
        with self._assigned_lock:
            self._assigned.difference_update(tps)
        for tp in tps:
            self._positions.pop(tp, None)
        if self.on_revoke is not None:
            self.on_revoke(tps)

    # -------------------------------------------------------------- port
    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        consumer = self._ensure()
        try:
            batches = consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except kerrors.CorruptRecordError as exc:
            return self._skip_unreadable(consumer, exc)
        except kerrors.KafkaError as exc:
            raise TransportError(f"poll: {exc!r}") from exc
        out: list[Record] = []
        for tp, recs in batches.items():
            if not recs:
                continue
            out.extend(
                Record(
                    tp.topic,
                    tp.partition,
                    r.offset,
                    r.key,
                    r.value,
                    tuple(r.headers or ()),
                    r.timestamp,
                )
                for r in recs
            )
            self._positions[(tp.topic, tp.partition)] = recs[-1].offset + 1
        return out

    def _skip_unreadable(self, consumer: KafkaConsumer, exc: BaseException) -> list[Record]:
        """Step over a record the client cannot parse and return it as ``unreadable``.

        kafka-python raises :class:`~kafka.errors.CorruptRecordError` for a batch that fails
        its CRC or a record it cannot decode (e.g. a header key that is not UTF-8), and keeps
        its position on that record, so every later poll raises again and the partition is
        blocked for good. The partition and offset are those of the record stream that raised
        (the fetcher's in-line records: kafka-python 3.0, pinned in ``pyproject.toml``). The
        position moves one past it, so a corrupt batch costs one dead letter per record.
        If the client does not say where it failed, the error is raised as a
        :class:`TransportError` (retried as before).
        """
        part = getattr(getattr(consumer, "_fetcher", None), "_next_partition_records", None)
        ktp = getattr(part, "topic_partition", None)
        offset = getattr(part, "next_fetch_offset", None)
        if ktp is None or not isinstance(offset, int):
            raise TransportError(f"poll: {exc!r}") from exc
        part.drain()
        try:
            consumer.seek(ktp, offset + 1)
        except ValueError as seek_exc:  # revoked meanwhile: its next owner meets the record
            raise TransportError(f"poll: {exc!r}") from seek_exc
        tp = (ktp.topic, ktp.partition)
        self._positions[tp] = offset + 1
        _log.error("skipping a record the Kafka client cannot read",
                   extra={"partition": ktp.partition, "offset": offset, "error": repr(exc)})
        return [Record(ktp.topic, ktp.partition, offset, None, None,
                       unreadable=f"{type(exc).__name__}: {exc}"[:512])]

    def assignment(self) -> set[TopicPartition]:
        with self._assigned_lock:
            return set(self._assigned)

    def seek(self, offsets: Mapping[TopicPartition, int]) -> None:
        consumer = self._ensure()
        for (topic, partition), offset in offsets.items():
            if (topic, partition) not in self._assigned:
                continue
            try:
                consumer.seek(KafkaTP(topic, partition), int(offset))
            except (ValueError, kerrors.KafkaError) as exc:  # unassigned meanwhile
                _log.warning("seek failed", extra={"partition": partition, "error": repr(exc)})
                continue
            self._positions[(topic, partition)] = int(offset)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit asynchronously (never blocks the loop, e.g. during an outage); the last
        requested offsets are committed synchronously, with a bounded wait, by :meth:`close`.
        A failure of an earlier async commit is raised here as :class:`TransportError`."""
        consumer = self._ensure()
        mine = {
            KafkaTP(t, p): OffsetAndMetadata(int(o), "", -1)  # -1: leader epoch unknown
            for (t, p), o in offsets.items()
            if (t, p) in self._assigned
        }
        error, self._commit_error = self._commit_error, None
        if mine:
            self._last_commit = mine
            try:
                consumer.commit_async(offsets=mine, callback=self._on_commit)
            except Exception as exc:  # commits are advisory: never let one kill the loop
                raise TransportError(f"commit: {exc!r}") from exc
        if error is not None:
            raise TransportError(f"commit: {error!r}")

    def _on_commit(self, offsets: Any, response: Any) -> None:
        if isinstance(response, BaseException):
            self._commit_error = response

    def topic_id(self) -> str | None:
        """The input topic's UUID from the cluster metadata (MetadataResponse v10+, Kafka ≥ 2.8;
        None on older brokers or an unknown topic)."""
        consumer = self._ensure()
        try:
            if not consumer.partitions_for_topic(self.topic):
                return None
            tid = consumer._client.cluster.topic_id(self.topic)
        except AttributeError:  # another client version: no topic ids
            return None
        except kerrors.KafkaError as exc:
            raise TransportError(f"topic metadata: {exc!r}") from exc
        return None if tid is None or int(tid) == 0 else str(tid)  # 0: Kafka's "no id"

    def committed(self) -> dict[TopicPartition, int]:
        """The group's committed offsets for every partition of the input topic (blocking,
        bounded by ``request_timeout_ms`` per partition; start-up only)."""
        consumer = self._ensure()
        timeout_ms = self.cfg.request_timeout_ms
        out: dict[TopicPartition, int] = {}
        try:
            for p in sorted(consumer.partitions_for_topic(self.topic)):
                offset = consumer.committed(KafkaTP(self.topic, p), timeout_ms=timeout_ms)
                if offset is not None and offset >= 0:
                    out[(self.topic, p)] = int(offset)
        except kerrors.KafkaError as exc:
            raise TransportError(f"committed offsets: {exc!r}") from exc
        return out

    def lag(self) -> dict[TopicPartition, int]:
        if self._consumer is None:
            return {}
        out: dict[TopicPartition, int] = {}
        for tp in self.assignment():
            try:
                high = self._consumer.highwater(KafkaTP(*tp))
            except (kerrors.KafkaError, ValueError):
                continue
            pos = self._positions.get(tp)
            if high is not None and pos is not None:
                out[tp] = max(int(high) - pos, 0)
        return out

    def connected(self) -> bool:
        """Best-effort and non-blocking: does the group coordinator answer?

        False when the coordinator is unknown or disconnected, or when a group heartbeat sent
        to it has had no response for ``broker_probe_timeout_ms`` — a frozen broker (SIGSTOP,
        a stuck JVM) keeps its TCP connections open, so the connection state alone stays
        "connected" until the request times out (``request_timeout_ms``, 30 s+). The heartbeat
        runs every ``heartbeat_interval_ms`` on kafka-python's IO thread, whatever the worker
        loop is doing, so this costs no request of its own and blocks nothing.

        Reads kafka-python's coordinator and heartbeat state (private API, guarded: another
        client version gives no opinion; free of side effects — ``coordinator_unknown()`` would
        mark a still-connecting coordinator dead). Reports False only after 1 s of continuous
        trouble, so a reconnect in progress does not flap readiness; :attr:`probe_error` says
        what is wrong (an :class:`AuthenticationError` if a reconnection's login was rejected).
        """
        consumer = self._consumer
        failure = self._auth.failure
        if failure is not None:
            error: TransportError | None = AuthenticationError(
                f"authentication failed: {failure!r}")
        else:
            detail = "consumer not created yet" if consumer is None else (
                _coordinator_problem(consumer)
                or _heartbeat_problem(consumer, self._probe_timeout_s)
            )
            error = None if detail is None else TransportError(detail)
        self.probe_error = error
        now = time.monotonic()
        if error is None:
            self._down_since = None
            return True
        if consumer is None:
            return False
        if self._down_since is None:
            self._down_since = now
        return now - self._down_since < 1.0


def _coordinator_problem(consumer: Any) -> str | None:
    """Why the group coordinator is not usable (unknown, disconnected), or None."""
    try:
        coordinator = consumer._coordinator
        client = consumer._client
        node = coordinator.coordinator_id
        if node is None:
            return "group coordinator unknown"
        if not client.connected(node):
            return f"not connected to the group coordinator (node {node})"
    except AttributeError:  # another client version: no opinion
        return None
    except Exception as exc:
        return f"coordinator state unavailable: {exc!r}"
    return None


def _heartbeat_problem(consumer: Any, timeout_s: float) -> str | None:
    """A heartbeat is in flight without a response for more than ``timeout_s``, or None.

    kafka-python's ``Heartbeat`` records ``last_send`` before a request and ``last_receive``
    after its response; a heartbeat disabled by a rebalance (partitions revoked anyway) or a
    missing attribute (another client version) gives no opinion.
    """
    try:
        coordinator = consumer._coordinator
        beat = coordinator.heartbeat
        sent, received = float(beat.last_send), float(beat.last_receive)
        enabled = bool(getattr(coordinator, "_heartbeat_enabled", True))
    except (AttributeError, TypeError, ValueError):
        return None
    waited = time.monotonic() - sent
    if enabled and sent > received and waited > timeout_s:
        return f"no response to a group heartbeat for {waited:.1f} s"
    return None


class KafkaSink:
    """Produce with ``acks="all"``, idempotence and compression.

    Retriable failures (an outage) are kept and retried, never dropped. A message the broker or
    the producer definitively refuses (``_retriable`` is False: too large, topic not authorised,
    invalid topic) cannot succeed on retry and is dropped, but never silently: it is logged at
    error level, counted per topic in :attr:`dropped`, and reported to :attr:`on_drop` (the
    worker points it at ``streammom_messages_dropped_total{topic}``).
    """

    def __init__(self, cfg: KafkaSettings) -> None:
        self.cfg = cfg
        self._producer: KafkaProducer | None = None
        self._inflight: list[tuple[Any, tuple[str, bytes | None, bytes | None, Headers]]] = []
        self._unsent: list[tuple[str, bytes | None, bytes | None, Headers]] = []
        self._closed = False
        self._auth = _AuthWatch()
        self.dropped: dict[str, int] = {}  # topic -> messages dropped (non-retriable errors)
        self.on_drop: Callable[[str], None] | None = None  # called with the topic of each drop

    def _drop(
        self, msg: tuple[str, bytes | None, bytes | None, Headers], exc: BaseException | None
    ) -> None:
        """Give up on ``msg`` after a non-retriable error: log, count, report."""
        _log_drop(msg, exc)
        topic = msg[0]
        self.dropped[topic] = self.dropped.get(topic, 0) + 1
        if self.on_drop is not None:
            try:
                self.on_drop(topic)
            except Exception as hook_exc:  # accounting must not turn a drop into a crash
                _log.warning("on_drop hook failed", extra={"error": repr(hook_exc)})

    def _ensure(self) -> KafkaProducer:
        if self._producer is not None:
            return self._producer
        cfg = self.cfg
        self._producer = _build(
            "producer",
            KafkaProducer,
            self._auth,
            cfg,
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=f"{cfg.client_id}-producer",
            acks="all",
            enable_idempotence=True,
            compression_type=cfg.compression_type,
            linger_ms=cfg.linger_ms,
            batch_size=256 * 1024,
            max_request_size=cfg.max_request_size,
            max_block_ms=cfg.max_block_ms,
            request_timeout_ms=cfg.request_timeout_ms,
            delivery_timeout_ms=max(120_000, cfg.request_timeout_ms + cfg.linger_ms + 1),
            bootstrap_timeout_ms=cfg.max_block_ms,
            reconnect_backoff_max_ms=2000,
        )
        return self._producer

    def _send(self, msg: tuple[str, bytes | None, bytes | None, Headers]) -> None:
        topic, key, value, headers = msg
        producer = self._ensure()
        fut = producer.send(topic, value=value, key=key, headers=list(headers) or None)
        self._inflight.append((fut, msg))

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers = ()
    ) -> None:
        msg = (topic, key, value, tuple(headers))
        if self._unsent:  # broker known to be unreachable: queue, flush() retries
            self._unsent.append(msg)
            return
        try:
            self._send(msg)
        except (kerrors.KafkaError, TransportError) as exc:
            if not _retriable(exc):
                self._drop(msg, exc)
                return
            self._unsent.append(msg)

    def flush(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        if self._unsent:
            unsent, self._unsent = self._unsent, []
            for i, msg in enumerate(unsent):
                try:
                    self._send(msg)
                except (kerrors.KafkaError, TransportError) as exc:
                    if not _retriable(exc):
                        self._drop(msg, exc)
                        continue
                    self._unsent = unsent[i:]
                    if isinstance(exc, AuthenticationError):
                        raise
                    raise TransportError(f"send: {exc!r}") from exc
        if not self._inflight:
            return
        producer = self._ensure()
        try:
            producer.flush(timeout=max(deadline - time.monotonic(), 0.1))
        except kerrors.KafkaError as exc:
            raise TransportError(f"flush: {exc!r}") from exc
        failed: list[tuple[str, bytes | None, bytes | None, Headers]] = []
        still: list[tuple[Any, tuple[str, bytes | None, bytes | None, Headers]]] = []
        first_error: BaseException | None = None
        for fut, msg in self._inflight:
            if not fut.is_done:
                still.append((fut, msg))
            elif fut.failed():
                exc = fut.exception
                if _retriable(exc):
                    failed.append(msg)
                    first_error = first_error or exc
                else:
                    self._drop(msg, exc)
        self._inflight = still
        if failed:
            self._unsent = failed + self._unsent
        if failed or still:
            raise TransportError(f"delivery incomplete: {first_error!r}")

    @property
    def pending(self) -> int:
        """Messages not yet acknowledged."""
        return len(self._inflight) + len(self._unsent)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._producer is not None:
            try:
                self._producer.close(timeout=5)
            except Exception as exc:
                _log.warning("producer close failed", extra={"error": repr(exc)})


def _retriable(exc: BaseException | None) -> bool:
    """Everything is retried except a broker's definitive, non-retriable answer about a message
    (e.g. ``MessageSizeTooLargeError``, ``InvalidTopicError``, authorisation failures). A
    rejected login is about the connection, not the message: kept and retried."""
    if is_authentication_error(exc):
        return True
    if isinstance(exc, kerrors.BrokerResponseError):
        return bool(getattr(exc, "retriable", False))
    return True


def _log_drop(
    msg: tuple[str, bytes | None, bytes | None, Headers], exc: BaseException | None
) -> None:
    topic, key, value, _ = msg
    _log.error(
        "dropping message after a non-retriable produce error",
        extra={"topic": topic, "key": key.decode("utf-8", "replace") if key else None,
               "bytes": len(value or b""), "error": repr(exc)},
    )
