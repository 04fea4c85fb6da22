"""Where the worker's state comes from at start-up (design §6, "state: exactly once").

* :func:`resolve_worker_id` — the suffix of the worker's models-topic key, kept across restarts.
* :func:`restored_counters` — the counters a checkpoint carries, validated.
* :func:`lost_state_start` — what ``checkpoint.on_lost_state`` does when there is no checkpoint
  but the consumer group has committed offsets (the state was lost).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from service.transport import TopicPartition
from streammom.serialization import atomic_write_bytes

__all__ = [
    "WORKER_ID_FILE",
    "StateLostError",
    "lost_state_start",
    "offset_labels",
    "resolve_worker_id",
    "restored_counters",
]

_log = logging.getLogger("streammom.worker")
WORKER_ID_FILE = "worker.id"
_WORKER_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


class StateLostError(RuntimeError):
    """The state was lost (no checkpoint, offsets committed) and ``on_lost_state=refuse``."""


def offset_labels(offsets: Mapping[TopicPartition, int]) -> dict[str, int]:
    """``{"topic[partition]": offset}`` in partition order, for log records.

    >>> offset_labels({("in", 1): 5, ("in", 0): 7})
    {'in[0]': 7, 'in[1]': 5}
    """
    return {f"{t}[{p}]": o for (t, p), o in sorted(offsets.items())}


def resolve_worker_id(explicit: str | None, directory: Path) -> str:
    """``explicit`` (``worker.id`` or ``kafka.group_instance_id``) if set, else the id kept in
    ``directory/worker.id`` (created on first start): the suffix of this worker's models-topic
    key, so several workers never overwrite each other's model."""
    if explicit:
        return explicit
    path = directory / WORKER_ID_FILE
    try:
        kept = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        kept = ""
    if _WORKER_ID.fullmatch(kept):
        return kept
    new_id = uuid.uuid4().hex[:12]
    try:
        atomic_write_bytes(path, new_id.encode("ascii") + b"\n")
    except OSError as exc:
        _log.warning("cannot keep the worker id in the checkpoint directory; using it for "
                     "this run only", extra={"path": str(path), "error": str(exc)})
    return new_id


def restored_counters(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The worker's counters from a checkpoint (missing ones are 0)."""
    return {
        "processed": int(raw.get("processed", 0)),
        "rejected": {str(k): int(v) for k, v in raw.get("rejected", {}).items()},
        "assignments": int(raw.get("assignments", 0)),
        "model_epoch": int(raw.get("model_epoch", 0)),
    }


def lost_state_start(
    committed: Mapping[TopicPartition, int], policy: str, *, directory: Path, group_id: str
) -> dict[TopicPartition, int] | None:
    """Apply ``checkpoint.on_lost_state`` to a start without a checkpoint; the offsets to start
    from, or ``None`` to start from the group's committed offsets.

    Offsets are committed only after a checkpoint covering them was written, so committed
    offsets without a checkpoint mean the state was lost (a wiped volume, a changed
    ``checkpoint.dir``): the group's position belongs to a model that no longer exists.
    ``rebuild`` (default) starts every input partition at its earliest retained offset, so
    the new state counts each retained event once; ``refuse`` raises :class:`StateLostError`
    (exit 2); ``resume`` continues from the committed offsets with a fresh model. Each is
    logged at error level.
    """
    extra = {"dir": str(directory), "policy": policy, "committed": offset_labels(committed)}
    lost = "state lost: no checkpoint but the consumer group has committed offsets; "
    if policy == "refuse":
        _log.error(lost + "refusing to start (checkpoint.on_lost_state=refuse)", extra=extra)
        raise StateLostError(
            f"no checkpoint in {directory} but consumer group {group_id!r} has committed "
            "offsets: the state was lost; restore the checkpoint directory, or set "
            "checkpoint.on_lost_state to 'rebuild' (re-learn from the earliest retained "
            "offsets) or 'resume'"
        )
    if policy == "rebuild":
        _log.error(lost + "rebuilding the state from the earliest retained offsets", extra=extra)
        return dict.fromkeys(committed, 0)
    _log.error(lost + "resuming from them with a fresh model (earlier events are not in it)",
               extra=extra)
    return None
