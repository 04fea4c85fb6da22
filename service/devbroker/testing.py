"""Small helpers for tests that talk to a real broker (used by ``tests/conftest.py``).

Client settings that keep consumer-group tests fast on a 2-core box are in
:data:`FAST_GROUP_CONSUMER`; always await conditions with :func:`wait_until`, never sleep.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from service.devbroker._proc import poll_until

# With the broker's group.initial.rebalance.delay.ms=0 a fresh group is joined in ~0.2 s even
# with kafka-python's defaults; what is slow by default is everything after: a member that
# dies without closing holds its partitions for session_timeout_ms (45 s default), and other
# members notice a rebalance only at their next heartbeat (3 s default). Measured here: a second
# member joining takes ~1 s with these settings. session_timeout_ms must be >= the broker's
# group.min.session.timeout.ms (6000).
FAST_GROUP_CONSUMER: dict[str, Any] = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 1000,
    "max_poll_interval_ms": 30000,
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
}


def unique_name(prefix: str = "test") -> str:
    """``<prefix>-<12 hex chars>``: a topic/group name no other test (or run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def wait_until(
    condition: Callable[[], bool], *, timeout: float = 30.0, what: str = "condition"
) -> None:
    """Poll ``condition`` with a short backoff; raise ``TimeoutError`` after ``timeout`` s."""
    if not poll_until(condition, timeout=timeout):
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def create_topic(
    admin: Any,
    name: str,
    partitions: int = 3,
    *,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> str:
    """Create ``name`` with ``admin`` (a ``KafkaAdminClient``), wait until all partitions have
    a leader, and return the name."""
    spec = {"num_partitions": partitions, "replication_factor": 1, "configs": dict(config or {})}
    admin.create_topics({name: spec}, timeout_ms=int(timeout * 1000))
    admin.wait_for_topics([name], timeout_ms=int(timeout * 1000))
    return name


def docker_engine_available() -> bool:
    """True only if a Docker engine answers (a docker client on PATH is not enough)."""
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True
