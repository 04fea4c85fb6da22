"""A real Prometheus server scrapes real targets.

* Harness self-check (no broker): Prometheus scrapes an in-process ``prometheus_client`` HTTP
  server with a known counter, and every PromQL expression in the Grafana dashboard and the
  alert rules is accepted by that live server.
* ``@pytest.mark.kafka``: Prometheus scrapes a ``streammom run`` daemon consuming from the
  real Kafka broker; after N valid sample events (plus interleaved malformed ones) its
  ``streammom_events_processed_total`` is N, and ``streammom_events_rejected_total`` counts the
  malformed ones by reason, both in Prometheus and in the daemon's own ``/metrics``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from daemon_harness import Daemon, make_topics, streammom_exe
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from prometheus_server import (
    PrometheusError,
    PrometheusServer,
    child_dies_with_parent,
    free_port,
    kill_process_group,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "streammom.json"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"


# --------------------------------------------------------------------------- harness self-check
class _Exporter:
    """An in-process prometheus_client HTTP server with one counter and one gauge."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events = Counter(
            "selfcheck_events", "Events seen by the self-check.", registry=self.registry
        )
        self.depth = Gauge(
            "selfcheck_depth", "A labelled gauge.", ["partition"], registry=self.registry
        )
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self.port = int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def exporter() -> Iterator[_Exporter]:
    exp = _Exporter()
    try:
        yield exp
    finally:
        exp.close()


@pytest.fixture(scope="module")
def selfcheck_prometheus(
    exporter: _Exporter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    server = PrometheusServer(
        tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{exporter.port}"], job="selfcheck"
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()
    assert server.proc is not None and server.proc.poll() is not None, "prometheus not stopped"


def test_harness_scrapes_and_queries_a_live_target(
    exporter: _Exporter, selfcheck_prometheus: PrometheusServer
) -> None:
    prom = selfcheck_prometheus
    exporter.events.inc(42)
    exporter.depth.labels(partition="3").set(7)

    prom.wait_for_value('up{job="selfcheck"}', 1)
    prom.wait_for_value('selfcheck_events_total{job="selfcheck"}', 42)
    series = prom.query("selfcheck_depth")
    assert len(series) == 1
    assert series[0]["metric"]["partition"] == "3"
    assert series[0]["metric"]["instance"] == f"127.0.0.1:{exporter.port}"
    assert float(series[0]["value"][1]) == 7

    # The value follows the target: scraping is live, not a one-off.
    exporter.events.inc(8)
    prom.wait_for_value('selfcheck_events_total{job="selfcheck"}', 50)

    # A query for a metric that does not exist is empty, not an error.
    assert prom.query_value("selfcheck_no_such_metric") is None
    [target] = prom.targets_health()
    assert target["health"] == "up", target


def test_harness_reports_a_down_target(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens here
    with PrometheusServer(tmp_path, [dead], job="nothing") as prom:
        prom.wait_for_value('up{job="nothing"}', 0)
        pid = prom.proc.pid if prom.proc else None
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _grafana_to_promql(expr: str) -> str:
    """Substitute Grafana's template variables so the expression can be sent to Prometheus."""
    replacements = {
        "$__rate_interval": "1m",
        "$__interval": "15s",
        "$__range": "1h",
        "$instance": ".*",
        "$job": "streammom",
    }
    for var, value in replacements.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unhandled template variable in {expr!r}"
    return expr


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr" and isinstance(value, str):
                    exprs.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dash)
    return exprs


def _alert_exprs() -> list[str]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in doc["groups"] for rule in group["rules"]]


def test_dashboard_and_alert_queries_run_on_a_real_prometheus(
    selfcheck_prometheus: PrometheusServer,
) -> None:
    exprs = [_grafana_to_promql(e) for e in _dashboard_exprs()] + _alert_exprs()
    assert len(exprs) >= 20
    for expr in exprs:
        selfcheck_prometheus.query(expr)  # raises PrometheusError on a parse/eval error
    # ...and the check bites: a malformed expression is rejected by the same server.
    with pytest.raises(PrometheusError, match="400"):
        selfcheck_prometheus.query("sum by (le (rate(x[5m]))")


# --------------------------------------------------------------------------- the real daemon
N_EVENTS = 2000
MALFORMED_EVERY = 100  # -> 20 malformed messages, cycling through every reject reason


def _metric_sum(text: str, sample_name: str) -> float | None:
    """Sum of all samples called ``sample_name`` in a text exposition, None if absent."""
    values = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == sample_name
    ]
    return sum(values) if values else None


@pytest.fixture
def daemon(
    kafka_topic_factory: Callable[..., str], kafka_bootstrap: str, tmp_path: Path
) -> Iterator[Daemon]:
    prefix = f"promscrape-{uuid.uuid4().hex[:8]}"
    topics = make_topics(kafka_topic_factory, prefix, partitions=3)
    d = Daemon(kafka_bootstrap, topics, tmp_path, group=f"{prefix}-group").start()
    try:
        yield d
    finally:
        code = kill_process_group(d.proc, grace=60)
        print(d.log_tail())
    # SIGTERM is the container stop signal: the daemon must drain and exit cleanly.
    assert code == 0, f"streammom run exited with {code} on SIGTERM\n{d.log_tail()}"


def _expected_rejections(n_events: int, every: int) -> dict[str, int]:
    """Reasons of the malformed messages `produce-sample --malformed-every` interleaves."""
    from service.synthetic import malformed_samples

    reasons = [reason for reason, _ in malformed_samples()]
    out: dict[str, int] = {}
    for k in range(n_events // every):
        out[reasons[k % len(reasons)]] = out.get(reasons[k % len(reasons)], 0) + 1
    return out


def _rejected_by_reason(text: str) -> dict[str, int]:
    return {
        sample.labels["reason"]: int(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "streammom_events_rejected_total" and sample.value
    }


@pytest.mark.kafka
def test_prometheus_scrapes_the_daemon(
    daemon: Daemon, kafka_bootstrap: str, tmp_path: Path
) -> None:
    expected_rejected = _expected_rejections(N_EVENTS, MALFORMED_EVERY)
    n_rejected = sum(expected_rejected.values())
    assert n_rejected == N_EVENTS // MALFORMED_EVERY

    def healthy() -> bool:
        daemon.alive()
        return daemon.get("/healthz")[0] == 200

    wait_until(healthy, timeout=90, what="streammom /healthz", diagnostics=daemon.log_tail)

    with PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{daemon.port}"]) as prom:
        prom.wait_for_value('up{job="streammom"}', 1)
        # The contract's build info is exported and scraped.
        prom.wait_for_value('count(streammom_build_info{job="streammom"} == 1)', 1)

        produce = subprocess.run(
            [
                streammom_exe(),
                "produce-sample",
                "--bootstrap",
                kafka_bootstrap,
                "--topic",
                daemon.topics["input"],
                "--events",
                str(N_EVENTS),
                "--malformed-every",
                str(MALFORMED_EVERY),
                "--rate",
                "5000",
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=child_dies_with_parent,
        )
        assert produce.returncode == 0, produce.stdout + produce.stderr

        def daemon_done() -> bool:
            daemon.alive()
            text = daemon.metrics_text()
            processed = _metric_sum(text, "streammom_events_processed_total") or 0
            rejected = _metric_sum(text, "streammom_events_rejected_total") or 0
            assert processed <= N_EVENTS, f"processed {processed} > {N_EVENTS}"
            assert rejected <= n_rejected, f"rejected {rejected} > {n_rejected}"
            return processed == N_EVENTS and rejected == n_rejected

        wait_until(
            daemon_done,
            timeout=180,
            what=f"daemon to process {N_EVENTS} events and reject {n_rejected}",
            diagnostics=daemon.log_tail,
        )
        prom.wait_for_value(
            'sum(streammom_events_processed_total{job="streammom"})', N_EVENTS, timeout=30
        )
        prom.wait_for_value(
            'sum(streammom_events_rejected_total{job="streammom"})', n_rejected, timeout=30
        )

        # Prometheus and the daemon's own /metrics agree, reason by reason.
        text = daemon.metrics_text()
        assert _metric_sum(text, "streammom_events_processed_total") == N_EVENTS
        assert _rejected_by_reason(text) == expected_rejected
        in_prom = {
            s["metric"]["reason"]: int(float(s["value"][1]))
            for s in prom.query('streammom_events_rejected_total{job="streammom"} > 0')
        }
        assert in_prom == expected_rejected

        names = {
            re.sub(r"_(total|bucket|sum|count|created)$", "", s["metric"]["__name__"])
            for s in prom.query('{job="streammom", __name__=~"streammom_.+"}')
        }
        for required in (
            "streammom_events_processed",
            "streammom_events_rejected",
            "streammom_batch_duration_seconds",
            "streammom_build_info",
            "streammom_ready",
        ):
            assert required in names, sorted(names)

        # The refit schedule: a daemon whose refits run falls back below its due count (a
        # refit in the helper holds it there only until it is back), and Prometheus sees the
        # same, so StreamMomNoRefit's condition stays empty.
        learned = N_EVENTS - n_rejected

        def schedule() -> tuple[float, float] | None:
            daemon.alive()
            text = daemon.metrics_text()
            since = _metric_sum(text, "streammom_events_since_refit")
            due = _metric_sum(text, "streammom_refit_due_events")
            return (since, due) if since is not None and due is not None and since < due else None

        since, _due = wait_until(schedule, timeout=60, what="the daemon below its refit due count",
                                diagnostics=daemon.log_tail)
        assert 0 <= since < learned  # the growth schedule refitted during the run
        prom.wait_for_value('count(streammom_refit_due_events{job="streammom"})', 1)
        wait_until(lambda: prom.query(
            'max by (job) (streammom_events_since_refit{job="streammom"}'
            ' - streammom_refit_due_events{job="streammom"}) >= 0') == [],
            timeout=60, what="no refit due in prometheus")
