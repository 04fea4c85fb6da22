"""yamllint over the deployment YAML; the example config loads in the daemon's own Settings."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import CONTRACT_METRICS, DEPLOY, REJECT_REASONS, REPO, run, tool

YAML_FILES = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml"), REPO / ".yamllint.yaml"])


def test_yamllint_strict() -> None:
    assert len(YAML_FILES) >= 10
    files = [str(p.relative_to(REPO)) for p in YAML_FILES]
    result = run([tool("yamllint"), "--strict", "-c", ".yamllint.yaml", *files])
    assert result.returncode == 0, result.stdout + result.stderr


def test_yamllint_bites(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("---\nkey: yes\nkey: no\n")
    result = run([tool("yamllint"), "--strict", "-c", str(REPO / ".yamllint.yaml"), str(bad)])
    assert result.returncode != 0
    assert "truthy" in result.stdout and "key-duplicates" in result.stdout


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("STREAMMOM_"):
            monkeypatch.delenv(key)


def test_example_config_loads_in_the_daemon_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.config import load_settings

    _clean_env(monkeypatch)
    settings = load_settings(DEPLOY / "streammom.toml")
    example = tomllib.loads((DEPLOY / "streammom.toml").read_text())
    dumped: dict[str, Any] = settings.model_dump(mode="json")
    for section, values in example.items():
        for key, value in values.items():
            assert dumped[section][key] == value, (section, key)


def test_configmap_config_loads_in_the_daemon_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from service.config import load_settings

    _clean_env(monkeypatch)
    cm = yaml.safe_load((DEPLOY / "k8s" / "configmap.yaml").read_text())
    path = tmp_path / "streammom.toml"
    path.write_text(cm["data"]["streammom.toml"])
    settings = load_settings(path)
    assert settings.http.port == 9108


def test_compose_and_k8s_env_are_real_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every STREAMMOM_* variable the deployments set is accepted and lands in Settings."""
    from service.config import load_settings

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    env: dict[str, str] = {
        k: str(v)
        for k, v in compose["services"]["ingest-1"]["environment"].items()
        if k != "STREAMMOM_CONFIG"
    }
    for name in ("learner.yaml", "ingest.yaml"):
        workload = yaml.safe_load((DEPLOY / "k8s" / name).read_text())
        for item in workload["spec"]["template"]["spec"]["containers"][0]["env"]:
            env[item["name"]] = item.get("value", "streammom-learner-0")  # fieldRef: pod name
    _clean_env(monkeypatch)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings(DEPLOY / "streammom.toml").model_dump(mode="json")
    for key, value in env.items():
        section, field = key.removeprefix("STREAMMOM_").lower().split("__")
        assert str(settings[section][field]) == value, key


def test_contract_metrics_exist_in_the_daemon_registry() -> None:
    """The names the dashboard and alerts rely on are what the daemon registers."""
    from prometheus_client.parser import text_string_to_metric_families

    from service.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    text = metrics.exposition().decode()
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    for name, kind in CONTRACT_METRICS.items():
        if kind == "histogram":
            assert families.get(name) == "histogram", name
            assert f"{name}_bucket" in samples, name
        elif kind == "counter":
            assert families.get(name.removesuffix("_total")) == "counter", name
        elif name not in samples:  # a labelled gauge has no samples until first set
            assert families.get(name) == "gauge", name
    reasons = {
        s.labels["reason"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "streammom_events_rejected_total"
    }
    assert reasons == set(REJECT_REASONS)
    assert any(n.startswith("process_") for n in samples)
