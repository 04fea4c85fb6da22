"""Shared helpers for the deployment-artefact tests (tests/deploy/)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

#: The daemon's metrics contract (exact exposition names; histograms as their base name).
CONTRACT_METRICS: dict[str, str] = {
    "streammom_events_processed_total": "counter",
    "streammom_events_without_features_total": "counter",
    "streammom_events_rejected_total": "counter",
    "streammom_messages_dropped_total": "counter",
    "streammom_batch_duration_seconds": "histogram",
    "streammom_consumer_lag_records": "gauge",
    "streammom_model_version": "gauge",
    "streammom_refit_duration_seconds": "histogram",
    "streammom_last_refit_timestamp_seconds": "gauge",
    "streammom_events_since_refit": "gauge",
    "streammom_refit_due_events": "gauge",
    "streammom_refit_held_events": "gauge",
    "streammom_leaf_share_shift": "gauge",
    "streammom_leaf_share_shift_threshold": "gauge",
    "streammom_input_paused": "gauge",
    "streammom_input_paused_seconds_total": "counter",
    "streammom_refit_process_failures_total": "counter",
    "streammom_tree_leaves": "gauge",
    "streammom_tree_depth": "gauge",
    "streammom_tree_leaves_empty": "gauge",
    "streammom_tree_provisional_splits": "gauge",
    "streammom_last_checkpoint_timestamp_seconds": "gauge",
    "streammom_ready": "gauge",
    "streammom_assignments_published_total": "counter",
    "streammom_build_info": "gauge",
    "streammom_vocabulary_tokens": "gauge",
    "streammom_vocabulary_capacity_tokens": "gauge",
    "streammom_vocabulary_oov_tokens_total": "counter",
    "streammom_vocabulary_recycled_columns_total": "counter",
    "streammom_vocabulary_candidate_tokens": "gauge",
    # scale-out roles (docs/design.md §6)
    "streammom_role_info": "gauge",
    "streammom_learner_active": "gauge",
    "streammom_model_epoch": "gauge",
    "streammom_state_events": "gauge",
    "streammom_frames_produced_total": "counter",
    "streammom_frames_consumed_total": "counter",
    "streammom_frame_events_skipped_total": "counter",
    "streammom_frame_gaps_total": "counter",
}
REJECT_REASONS = ("unreadable", "invalid_json", "not_utf8", "schema", "empty", "oversized",
                  "unknown_type")
HTTP_PORT = 9108

#: Settings env names the daemon understands (STREAMMOM_<SECTION>__<KEY>) and STREAMMOM_CONFIG.
CONTRACT_ENV = {
    "STREAMMOM_CONFIG",
    "STREAMMOM_KAFKA__BOOTSTRAP_SERVERS",
    "STREAMMOM_KAFKA__GROUP_ID",
    "STREAMMOM_KAFKA__GROUP_INSTANCE_ID",
    "STREAMMOM_TOPICS__INPUT",
    "STREAMMOM_TOPICS__ASSIGNMENTS",
    "STREAMMOM_TOPICS__MODELS",
    "STREAMMOM_TOPICS__DEAD_LETTERS",
    "STREAMMOM_TOPICS__FRAMES",
    "STREAMMOM_TOPICS__LEARNER_STATE",
    "STREAMMOM_WORKER__ROLE",
    "STREAMMOM_CHECKPOINT__DIR",
    "STREAMMOM_HTTP__HOST",
    "STREAMMOM_HTTP__PORT",
}

_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_PROMQL_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "inf",
    "nan",
}


def tool(name: str) -> str:
    """Path of a command-line tool: the venv's bin directory first, then PATH.

    A missing tool is a test *failure*, never a skip: ``make test`` installs every one of them
    (dev extra + ``make system-deps``).
    """
    beside = Path(sys.executable).with_name(name)
    if beside.exists() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if not found:
        pytest.fail(
            f"`{name}` not found beside {sys.executable} nor on PATH; "
            "run `make install` (dev extra) and `make system-deps`"
        )
    return found


def run(
    cmd: Sequence[str], *, cwd: Path = REPO, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output (never raises on a non-zero exit)."""
    return subprocess.run(
        list(cmd),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def promql_metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (histogram series map to their base).

    A small lexer, not a parser: it drops string literals, label matchers, range/subquery
    brackets, ``by (...)``-style label lists and function names, and keeps the identifiers
    left over.

    >>> sorted(promql_metric_names('histogram_quantile(0.9, sum by (le) '
    ...     '(rate(streammom_batch_duration_seconds_bucket{x="y"}[5m]))) / up'))
    ['streammom_batch_duration_seconds', 'up']
    >>> sorted(promql_metric_names('rate(other_seconds_count[1m]) offset 5m'))
    ['other_seconds_count']
    >>> sorted(promql_metric_names('time() - max by (job) (b_timestamp_seconds) > 3600'))
    ['b_timestamp_seconds']
    """
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names: set[str] = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        word = match.group(0)
        rest = s[match.end() :].lstrip()
        if rest.startswith("("):  # function call
            continue
        if word.lower() in _PROMQL_KEYWORDS:
            continue
        prev = s[: match.start()]
        if re.search(r"[0-9.]$", prev):  # exponent/duration tail such as 1e5 or 5m
            continue
        for suffix in _HISTOGRAM_SUFFIXES:
            base = word[: -len(suffix)]
            if word.endswith(suffix) and CONTRACT_METRICS.get(base) == "histogram":
                word = base
        names.add(word)
    return names


def allowed_metric(name: str) -> bool:
    """Whether dashboards/alerts may use ``name``: the contract, ``up`` or ``process_*``."""
    return name in CONTRACT_METRICS or name == "up" or name.startswith("process_")


# --------------------------------------------------------------------------- .dockerignore
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


class DockerIgnore:
    """The subset of Docker's .dockerignore semantics the repository uses.

    Patterns are matched against slash-separated context-relative paths, a path is excluded
    when it or one of its parent directories matches, ``!`` re-includes, and the last
    matching pattern wins.
    """

    def __init__(self, text: str) -> None:
        self.rules: list[tuple[bool, re.Pattern[str], str]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            pat = line[1:].strip() if negate else line
            pat = pat.strip("/")
            if pat.startswith("./"):
                pat = pat[2:]
            self.rules.append((negate, _pattern_regex(pat), pat))

    def excluded(self, rel: str) -> bool:
        parts = rel.split("/")
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        result = False
        for negate, regex, _ in self.rules:
            if any(regex.match(c) for c in candidates):
                result = not negate
        return result

    def context_files(self, root: Path) -> Iterable[str]:
        """Every file Docker would send as build context (relative paths)."""
        reincluded_tops = {p.split("/")[0] for neg, _, p in self.rules if neg}
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            rel_dir = "" if rel_dir == "." else rel_dir
            keep = []
            for d in dirnames:
                rel = f"{rel_dir}/{d}" if rel_dir else d
                top = rel.split("/")[0]
                if d == ".git" or (self.excluded(rel) and top not in reincluded_tops):
                    continue
                keep.append(d)
            dirnames[:] = keep
            for f in filenames:
                rel = f"{rel_dir}/{f}" if rel_dir else f
                if not self.excluded(rel):
                    yield rel
