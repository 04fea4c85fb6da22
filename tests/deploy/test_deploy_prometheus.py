"""Alert rules: promtool-valid, unit-tested (every alert firing and not firing), on contract."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import DEPLOY, allowed_metric, promql_metric_names, run, tool

PROM = DEPLOY / "prometheus"
REQUIRED_ALERTS = {
    "StreamMomConsumerLagGrowing",
    "StreamMomNoRefit",
    "StreamMomDeadLetterRateHigh",
    "StreamMomNotReady",
    "StreamMomCheckpointStale",
    "StreamMomDown",
}


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((PROM / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_check_rules() -> None:
    result = run([tool("promtool"), "check", "rules", str(PROM / "alerts.yml")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules() -> None:
    result = run([tool("promtool"), "test", "rules", "alerts_test.yml"], cwd=PROM)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules_bites(tmp_path: Path) -> None:
    """The unit tests catch a broken threshold (here: dead-letter 5% -> 50%)."""
    shutil.copy(PROM / "alerts_test.yml", tmp_path)
    text = (PROM / "alerts.yml").read_text()
    assert "> 0.05" in text
    (tmp_path / "alerts.yml").write_text(text.replace("> 0.05", "> 0.5"))
    result = run([tool("promtool"), "test", "rules", "alerts_test.yml"], cwd=tmp_path)
    assert result.returncode != 0
    assert "StreamMomDeadLetterRateHigh" in result.stdout + result.stderr


def test_promtool_check_compose_config(tmp_path: Path) -> None:
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    config["rule_files"] = [str(PROM / "alerts.yml")]  # the compose mount, locally
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(config))
    result = run([tool("promtool"), "check", "config", str(local)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_present_labelled_and_annotated(rules: list[dict[str, Any]]) -> None:
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED_ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]
        assert "for" in rule, rule["alert"]


def test_alert_metrics_on_contract(rules: list[dict[str, Any]]) -> None:
    for rule in rules:
        names = promql_metric_names(rule["expr"])
        assert names, rule["alert"]
        bad = {n for n in names if not allowed_metric(n)}
        assert not bad, f"{rule['alert']} uses metrics outside the contract: {bad}"


def test_every_alert_fires_and_stays_quiet_in_the_unit_tests(rules: list[dict[str, Any]]) -> None:
    tests = yaml.safe_load((PROM / "alerts_test.yml").read_text())
    assert tests["rule_files"] == ["alerts.yml"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in rules}
    assert names - fires == set(), f"alerts never tested firing: {names - fires}"
    assert names - quiet == set(), f"alerts never tested quiet: {names - quiet}"
