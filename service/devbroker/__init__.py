"""A real Apache Kafka broker (from Maven Central jars, no Docker) for tests and development.

* :class:`KafkaBroker` — restartable single-node KRaft broker on 127.0.0.1 (context manager).
* :func:`find_kafka_libs` — locate/resolve the pinned broker jars (``pom.xml`` next to this file).
* :func:`serve` — what ``streammom dev-broker`` runs.
"""

from service.devbroker.broker import (
    BrokerError,
    KafkaBroker,
    admin_ready,
    java_available,
    new_cluster_id,
)
from service.devbroker.libs import KafkaLibsNotFoundError, find_kafka_libs, resolve_kafka_libs
from service.devbroker.serve import serve

__all__ = [
    "BrokerError",
    "KafkaBroker",
    "KafkaLibsNotFoundError",
    "admin_ready",
    "find_kafka_libs",
    "java_available",
    "new_cluster_id",
    "resolve_kafka_libs",
    "serve",
]
