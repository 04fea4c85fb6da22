"""deploy/grafana/streammom.json: loads, covers the required panels, queries only the contract."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from deploy_helpers import CONTRACT_METRICS, DEPLOY, allowed_metric, promql_metric_names

DASHBOARD = DEPLOY / "grafana" / "streammom.json"


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in _panels(dash)
        for target in panel.get("targets", [])
    ]


def test_shape(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "streammom"
    assert isinstance(dashboard["schemaVersion"], int)
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in _panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]


def test_datasource_is_templated(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in _panels(dashboard):
        if panel["type"] == "row":
            continue
        refs = [panel["datasource"]] + [t["datasource"] for t in panel["targets"]]
        for ref in refs:
            assert ref == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_every_metric_is_on_the_contract(dashboard: dict[str, Any]) -> None:
    used: set[str] = set()
    for title, expr in _exprs(dashboard):
        names = promql_metric_names(expr)
        assert names, (title, expr)
        bad = {n for n in names if not allowed_metric(n)}
        assert not bad, f"panel {title!r} uses metrics outside the contract: {bad}"
        used |= names
    # ...and the dashboard shows every contract metric.
    assert set(CONTRACT_METRICS) - used == set()


def test_required_panels(dashboard: dict[str, Any]) -> None:
    exprs = [e for _, e in _exprs(dashboard)]

    def has(*needles: str) -> bool:
        return any(all(n in e for n in needles) for e in exprs)

    assert has("rate(streammom_events_processed_total")
    assert has("streammom_consumer_lag_records", "partition")
    for q in ("0.5", "0.95", "0.99"):
        assert has(f"histogram_quantile({q},", "streammom_batch_duration_seconds_bucket")
    assert has("streammom_events_rejected_total", "by (reason)")
    assert has("streammom_model_version")
    assert has("streammom_tree_leaves") and has("streammom_tree_depth")
    assert has("streammom_refit_duration_seconds")
    assert has("time() - ", "streammom_last_checkpoint_timestamp_seconds")


def test_job_is_a_variable_not_hard_coded(dashboard: dict[str, Any]) -> None:
    """A Prometheus Operator or a custom scrape config names the job differently: every query
    selects the job through the ``$job`` variable (default "streammom")."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["job"]["current"]["value"] == "streammom"
    assert "$job" in variables["instance"]["definition"]
    for title, expr in _exprs(dashboard):
        assert "job=" not in expr.replace('job=~"$job"', ""), (title, expr)
        assert 'job=~"$job"' in expr, (title, expr)
