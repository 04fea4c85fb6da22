"""Shared fixtures: a real Apache Kafka broker for integration tests, and topic helpers.

Broker choice for ``kafka_bootstrap`` (first that applies):
  1. ``STREAMMOM_KAFKA_BOOTSTRAP`` — an external broker (e.g. compose on a laptop);
  2. a local JVM broker from Maven Central jars (``service.devbroker``) if ``java`` and the jars
     (or ``mvn`` to resolve them) are present;
  3. testcontainers ``KafkaContainer`` if a Docker engine actually answers;
  4. otherwise the test is skipped — or fails when ``STREAMMOM_REQUIRE_KAFKA=1`` (``make test``).

Tests using any Kafka fixture get the ``kafka`` marker automatically (``make unit`` skips them).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

from service.devbroker import (
    KafkaBroker,
    KafkaLibsNotFoundError,
    find_kafka_libs,
    java_available,
)
from service.devbroker.libs import maven_available
from service.devbroker.testing import create_topic, docker_engine_available, unique_name

EXTERNAL_BOOTSTRAP_ENV = "STREAMMOM_KAFKA_BOOTSTRAP"
REQUIRE_KAFKA_ENV = "STREAMMOM_REQUIRE_KAFKA"
KAFKA_FIXTURES = frozenset(
    {"kafka_bootstrap", "kafka_broker", "kafka_broker_factory", "kafka_topic_factory"}
)

TopicFactory = Callable[..., str]
BrokerFactory = Callable[..., KafkaBroker]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a Kafka fixture with ``@pytest.mark.kafka``.

    Under pytest-xdist (``make test`` runs one worker per core, ``--dist loadgroup``) the Kafka
    tests also form one group, so a single worker runs them all against one broker JVM while
    the other workers take the library's tests.
    """
    grouped = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if KAFKA_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kafka)
            if grouped:
                item.add_marker(pytest.mark.xdist_group(name="kafka"))


def kafka_unavailable(reason: str) -> NoReturn:
    """Skip — or fail if ``STREAMMOM_REQUIRE_KAFKA=1`` — because no suitable broker exists."""
    if os.environ.get(REQUIRE_KAFKA_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_KAFKA_ENV}=1 requires a real Kafka broker)",
                    pytrace=False)
    pytest.skip(reason)


def _local_broker_missing() -> str | None:
    """Why a local JVM broker cannot be started, or None if it can."""
    if not java_available():
        return "no `java` on PATH"
    try:
        find_kafka_libs(resolve=False)
    except KafkaLibsNotFoundError:
        if not maven_available():
            return "no Kafka broker jars and no `mvn` to resolve them (make kafka-libs)"
    return None


def _start_local_broker(**kwargs: Any) -> KafkaBroker:
    """Start a local JVM broker; missing jars => unavailable, a failing broker => error."""
    try:
        libs = find_kafka_libs()
    except KafkaLibsNotFoundError as exc:
        kafka_unavailable(str(exc))
    return KafkaBroker(libs_dir=libs, **kwargs).start()


@dataclass(frozen=True)
class KafkaBackend:
    """The session's broker: where it is, what it is, and the broker object if we own a JVM."""

    bootstrap: str
    kind: str  # "external" | "jvm" | "testcontainers"
    broker: KafkaBroker | None = None


@pytest.fixture(scope="session")
def kafka_backend() -> Iterator[KafkaBackend]:
    """The session-wide broker (see module docstring for the order of choice)."""
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        yield KafkaBackend(external, "external")
        return
    missing = _local_broker_missing()
    if missing is None:
        broker = _start_local_broker()
        try:
            yield KafkaBackend(broker.bootstrap, "jvm", broker)
        finally:
            broker.close()
        return
    if docker_engine_available():
        from testcontainers.community.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            yield KafkaBackend(container.get_bootstrap_server(), "testcontainers")
        return
    kafka_unavailable(f"no Kafka broker: {missing}; no Docker engine; {EXTERNAL_BOOTSTRAP_ENV} "
                      "unset")


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_backend: KafkaBackend) -> str:
    """``bootstrap_servers`` of the session's real Kafka broker ("host:port")."""
    return kafka_backend.bootstrap


@pytest.fixture(scope="session")
def kafka_broker(kafka_backend: KafkaBackend) -> Iterator[KafkaBroker]:
    """A restartable local JVM broker (``stop()``/``start()``/``restart()``, same port and data).

    It is the session broker when that is the local JVM; otherwise a dedicated one is started.
    Tests that stop it must start it again (``try/finally``): other tests share it.
    """
    if kafka_backend.broker is not None:
        yield kafka_backend.broker
        return
    missing = _local_broker_missing()
    if missing is not None:
        kafka_unavailable(f"no restartable local Kafka broker: {missing}")
    broker = _start_local_broker()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def kafka_broker_factory() -> Iterator[BrokerFactory]:
    """``make(**KafkaBroker kwargs) -> started KafkaBroker``; all are closed after the test."""
    missing = _local_broker_missing()
    if missing is not None:
        kafka_unavailable(f"no local Kafka broker: {missing}")
    made: list[KafkaBroker] = []

    def make(**kwargs: Any) -> KafkaBroker:
        broker = _start_local_broker(**kwargs)
        made.append(broker)
        return broker

    yield make
    for broker in made:
        broker.close()


@pytest.fixture
def kafka_topic_factory(kafka_bootstrap: str) -> Iterator[TopicFactory]:
    """``make(partitions=3, *, prefix="test", config=None) -> topic name`` (unique, ready).

    The topics are deleted (best effort) after the test.
    """
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, client_id="tests-topic-factory")
    created: list[str] = []

    def make(
        partitions: int = 3, *, prefix: str = "test", config: Mapping[str, str] | None = None
    ) -> str:
        name = create_topic(admin, unique_name(prefix), partitions, config=config)
        created.append(name)
        return name

    try:
        yield make
    finally:
        if created:
            with contextlib.suppress(Exception):
                admin.delete_topics(created, timeout_ms=10_000)
        admin.close()
