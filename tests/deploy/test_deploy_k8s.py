"""deploy/k8s: schema-valid (kubernetes-validate, strict) and wired to the daemon contract."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import CONTRACT_ENV, DEPLOY, HTTP_PORT, run, tool

K8S = DEPLOY / "k8s"
#: Oldest and newest minor versions we validate against (both bundled with kubernetes-validate).
K8S_VERSIONS = ("1.30.0", "1.35.0")
NAME = {"app.kubernetes.io/name": "streammom"}
#: The two workloads of the scale-out (docs/design.md §6): kind, name, role.
WORKLOADS = (("StatefulSet", "streammom-learner", "learner"),
             ("Deployment", "streammom-ingest", "ingest"))


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.fixture(scope="module")
def resources() -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in _manifest_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kubernetes_validate_strict(version: str) -> None:
    files = [str(p) for p in _manifest_files()]
    assert len(files) >= 4
    result = run([tool("kubernetes-validate"), "--strict", "-k", version, *files])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") >= 5, result.stdout


def test_kubernetes_validate_bites(tmp_path: Path) -> None:
    sts = yaml.safe_load((K8S / "learner.yaml").read_text())
    sts["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {"httpGet": {"port": 1}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(sts))
    result = run([tool("kubernetes-validate"), "--strict", "-k", K8S_VERSIONS[-1], str(bad)])
    assert result.returncode != 0
    assert "livenesProbe" in result.stdout + result.stderr


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == sorted(p.name for p in _manifest_files())


def _labels(role: str) -> dict[str, str]:
    return {**NAME, "app.kubernetes.io/component": role}


def _container(resources: dict[tuple[str, str], dict[str, Any]], kind: str, name: str
               ) -> dict[str, Any]:
    [container] = resources[(kind, name)]["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("kind, name, role", WORKLOADS)
def test_workload(resources: dict[tuple[str, str], dict[str, Any]], kind: str, name: str,
                  role: str) -> None:
    spec = resources[(kind, name)]["spec"]
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"] == _labels(role)
    assert _labels(role).items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["terminationGracePeriodSeconds"] == 60
    assert pod["enableServiceLinks"] is False
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 10001 and psc["fsGroup"] == 10001

    c = _container(resources, kind, name)
    assert c["args"][0] == "run"
    assert c["args"][c["args"].index("--config") + 1] == "/etc/streammom/streammom.toml"
    csc = c["securityContext"]
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"]["drop"] == ["ALL"]
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][bound]), bound
    assert [p["containerPort"] for p in c["ports"] if p["name"] == "http"] == [HTTP_PORT]

    env = {e["name"]: e for e in c["env"]}
    assert set(env) <= CONTRACT_ENV, set(env) - CONTRACT_ENV
    assert env["STREAMMOM_WORKER__ROLE"]["value"] == role
    assert env["STREAMMOM_HTTP__PORT"]["value"] == str(HTTP_PORT)


def test_learner_is_an_active_and_a_standby(
    resources: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """Two learners with stable names (static group members): one holds the frames
    partition, the other takes over."""
    spec = resources[("StatefulSet", "streammom-learner")]["spec"]
    assert spec["replicas"] == 2
    assert resources[("Service", spec["serviceName"])]["spec"]["clusterIP"] == "None"
    env = {e["name"]: e for e in _container(resources, "StatefulSet", "streammom-learner")["env"]}
    gid = env["STREAMMOM_KAFKA__GROUP_INSTANCE_ID"]
    assert gid["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_ingest_scales_on_lag(resources: dict[tuple[str, str], dict[str, Any]]) -> None:
    spec = resources[("Deployment", "streammom-ingest")]["spec"]
    assert 1 <= spec["replicas"] <= 6  # <= partitions of the input topic
    env = {e["name"] for e in _container(resources, "Deployment", "streammom-ingest")["env"]}
    assert "STREAMMOM_KAFKA__GROUP_INSTANCE_ID" not in env  # pod names are not stable
    [scaled] = yaml.safe_load_all((K8S / "keda" / "scaledobject.yaml").read_text())
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                "name": "streammom-ingest"}
    assert scaled["spec"]["maxReplicaCount"] <= 6
    [trigger] = scaled["spec"]["triggers"]
    assert "streammom_consumer_lag_records" in trigger["metadata"]["query"]


@pytest.mark.parametrize("kind, name, role", WORKLOADS)
def test_probes(resources: dict[tuple[str, str], dict[str, Any]], kind: str, name: str,
                role: str) -> None:
    c = _container(resources, kind, name)
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert c[probe]["httpGet"]["port"] in ("http", HTTP_PORT)
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


@pytest.mark.parametrize("kind, name, role", WORKLOADS)
def test_volumes_writable_scratch_only(resources: dict[tuple[str, str], dict[str, Any]],
                                       kind: str, name: str, role: str) -> None:
    """No state on the pods: the learner's checkpoints are in the learner-state topic, an
    ingest worker has none."""
    spec = resources[(kind, name)]["spec"]
    c = _container(resources, kind, name)
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts["/var/lib/streammom"]["name"]]
    assert "volumeClaimTemplates" not in spec
    assert mounts["/etc/streammom"]["readOnly"] is True
    config_map = volumes[mounts["/etc/streammom"]["name"]]["configMap"]["name"]
    assert "streammom.toml" in resources[("ConfigMap", config_map)]["data"]


def test_configmap_toml_matches_the_example(
    resources: dict[tuple[str, str], dict[str, Any]],
) -> None:
    cm = tomllib.loads(resources[("ConfigMap", "streammom-config")]["data"]["streammom.toml"])
    example = tomllib.loads((DEPLOY / "streammom.toml").read_text())
    assert {s: set(v) for s, v in cm.items()} == {s: set(v) for s, v in example.items()}
    assert cm["http"]["port"] == HTTP_PORT
    assert cm["checkpoint"]["dir"] == "/var/lib/streammom"
    assert cm["topics"] == example["topics"]


def test_services_and_pdb(resources: dict[tuple[str, str], dict[str, Any]]) -> None:
    metrics = resources[("Service", "streammom-metrics")]
    annotations = metrics["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(HTTP_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"
    assert metrics["spec"]["selector"] == NAME  # every role is scraped
    assert resources[("Service", "streammom-headless")]["spec"]["selector"] == _labels("learner")
    for kind, name in resources:
        if kind == "Service":
            assert [p["port"] for p in resources[(kind, name)]["spec"]["ports"]] == [HTTP_PORT]
    for _, _, role in WORKLOADS:
        pdb = resources[("PodDisruptionBudget", f"streammom-{role}")]["spec"]
        assert pdb["maxUnavailable"] == 1
        assert pdb["selector"]["matchLabels"] == _labels(role)


def test_service_monitor_selects_the_metrics_port() -> None:
    """The Prometheus Operator ServiceMonitor scrapes the same Service port and path as the
    annotations, and names the job "streammom" (what the dashboard and alerts default to)."""
    [monitor] = yaml.safe_load_all(
        (K8S / "prometheus-operator" / "servicemonitor.yaml").read_text())
    services = [d for d in yaml.safe_load_all((K8S / "service.yaml").read_text())
                if d["metadata"]["name"] == "streammom-metrics"]
    [service] = services
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == service["metadata"]["annotations"]["prometheus.io/path"]
    label = monitor["spec"]["jobLabel"]
    assert service["metadata"]["labels"][label] == "streammom"
