"""deploy/compose.yaml: schema-valid and consistent with the daemon contract.

No compose plugin or engine here, so the file is validated against the Compose Specification
JSON schema (vendored in the check-jsonschema wheel) plus structural checks.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shlex
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from deploy_helpers import CONTRACT_ENV, DEPLOY, HTTP_PORT, REPO

COMPOSE = DEPLOY / "compose.yaml"
#: The streammom services: the learner and two ingest workers (docs/design.md §6).
WORKERS = ("learner", "ingest-1", "ingest-2")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def compose_schema() -> dict[str, Any]:
    try:
        vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    except ModuleNotFoundError:
        pytest.fail("check-jsonschema (dev extra) is not installed: it ships the compose schema")
    return json.loads(vendor.joinpath("compose-spec.json").read_text())


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_schema_valid(compose: dict[str, Any], compose_schema: dict[str, Any]) -> None:
    jsonschema.validate(compose, compose_schema)


def test_schema_bites(compose: dict[str, Any], compose_schema: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["learner"]["depends_on"]["kafka"]["condition"] = "service_ready"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, compose_schema)
    broken = copy.deepcopy(compose)
    broken["services"]["grafana"]["port"] = ["3000:3000"]  # typo'd key
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, compose_schema)


def test_services_and_pinned_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "kafka-init", *WORKERS, "producer", "prometheus", "grafana"} <= set(
        services
    )
    expected = {
        "kafka": r"apache/kafka:4\.\d+\.\d+",
        "kafka-init": r"apache/kafka:4\.\d+\.\d+",
        "prometheus": r"prom/prometheus:v\d+\.\d+\.\d+",
        "grafana": r"grafana/grafana:\d+\.\d+\.\d+",
    }
    for name, pattern in expected.items():
        assert re.fullmatch(pattern, services[name]["image"]), (name, services[name]["image"])
    for name, svc in services.items():
        image = svc.get("image", "")
        assert "latest" not in image, name
        if "build" not in svc:
            assert re.search(r":[^/]+$", image), f"{name}: image tag not pinned"
    assert services["kafka"]["image"] == services["kafka-init"]["image"]


def test_kafka_is_a_single_kraft_node(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    env = _env(kafka)
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    # KRaft cluster ids are base64url-encoded 16-byte UUIDs (22 characters, no padding).
    assert len(env["CLUSTER_ID"]) == 22
    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    listeners = {item.split("://")[0] for item in env["KAFKA_LISTENERS"].split(",")}
    protocol_map = dict(
        item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    assert listeners <= set(protocol_map)
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
    ):
        assert env[key] == "1"
    assert "kafka-broker-api-versions.sh" in " ".join(kafka["healthcheck"]["test"])


def _created_topics(init: dict[str, Any]) -> dict[str, dict[str, str]]:
    script = "\n".join(init["command"]) if isinstance(init["command"], list) else init["command"]
    topics: dict[str, dict[str, str]] = {}
    for line in script.splitlines():
        words = shlex.split(line) if line.strip().startswith("create ") else []
        if not words:
            continue
        opts: dict[str, str] = {}
        for flag, value in zip(words[1::2], words[2::2], strict=False):
            opts[flag] = value if flag not in opts else f"{opts[flag]},{value}"
        topics[opts["--topic"]] = opts
    return topics


def test_topics_created_match_the_worker(compose: dict[str, Any]) -> None:
    services = compose["services"]
    init = services["kafka-init"]
    assert init["depends_on"]["kafka"]["condition"] == "service_healthy"
    topics = _created_topics(init)
    env = _env(services["learner"])
    assert set(topics) == {
        env["STREAMMOM_TOPICS__INPUT"],
        env["STREAMMOM_TOPICS__ASSIGNMENTS"],
        env["STREAMMOM_TOPICS__MODELS"],
        env["STREAMMOM_TOPICS__DEAD_LETTERS"],
        env["STREAMMOM_TOPICS__FRAMES"],
        env["STREAMMOM_TOPICS__LEARNER_STATE"],
    }
    assert topics[env["STREAMMOM_TOPICS__INPUT"]]["--partitions"] == "6"
    assert topics[env["STREAMMOM_TOPICS__FRAMES"]]["--partitions"] == "1"  # the election
    for compacted in ("MODELS", "LEARNER_STATE"):
        assert topics[env[f"STREAMMOM_TOPICS__{compacted}"]]["--config"] == \
            "cleanup.policy=compact"
    assert env["STREAMMOM_TOPICS__DEAD_LETTERS"] == env["STREAMMOM_TOPICS__INPUT"] + ".dlq"
    # idempotent re-runs: every create goes through `kafka-topics.sh --create --if-not-exists`
    script = "\n".join(init["command"])
    assert re.search(r"create\(\) \{[^}]*--create --if-not-exists", script), script


@pytest.mark.parametrize("name", WORKERS)
def test_worker_contract(compose: dict[str, Any], name: str) -> None:
    services = compose["services"]
    worker = services[name]
    assert worker["build"]["context"] == ".."
    assert (COMPOSE.parent / worker["build"]["context"] / worker["build"]["dockerfile"]).is_file()
    assert worker["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert worker["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"
    env = _env(worker)
    assert set(env) <= CONTRACT_ENV, set(env) - CONTRACT_ENV
    assert env["STREAMMOM_WORKER__ROLE"] == ("learner" if name == "learner" else "ingest")
    assert env["STREAMMOM_KAFKA__BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert env["STREAMMOM_HTTP__HOST"] == "0.0.0.0"
    assert env["STREAMMOM_HTTP__PORT"] == str(HTTP_PORT)
    assert env["STREAMMOM_CHECKPOINT__DIR"] == "/var/lib/streammom"
    assert any(p.endswith(f":{HTTP_PORT}") for p in worker["ports"])
    assert any(v.endswith(":/var/lib/streammom") for v in worker["volumes"])


def test_one_learner_and_two_ingest_workers_share_one_model(compose: dict[str, Any]) -> None:
    """The scale-out of docs/design.md §6: same group, topics and model; distinct instance ids
    and host ports."""
    envs = {name: _env(compose["services"][name]) for name in WORKERS}
    roles = sorted(env["STREAMMOM_WORKER__ROLE"] for env in envs.values())
    assert roles == ["ingest", "ingest", "learner"]
    shared = {k: v for k, v in envs["learner"].items()
              if k not in ("STREAMMOM_WORKER__ROLE", "STREAMMOM_KAFKA__GROUP_INSTANCE_ID")}
    for env in envs.values():
        assert shared.items() <= env.items()
    assert len({env["STREAMMOM_KAFKA__GROUP_INSTANCE_ID"] for env in envs.values()}) == 3
    host_ports = [p.split(":")[0] for n in WORKERS for p in compose["services"][n]["ports"]]
    assert len(set(host_ports)) == len(host_ports)


def test_producer_runs_produce_sample(compose: dict[str, Any]) -> None:
    services = compose["services"]
    producer = services["producer"]
    assert producer["image"] == services["learner"]["image"]
    cmd = producer["command"]
    assert cmd[0] == "produce-sample"
    opts = dict(zip(cmd[1::2], cmd[2::2], strict=True))
    assert opts["--bootstrap"] == _env(services["learner"])["STREAMMOM_KAFKA__BOOTSTRAP_SERVERS"]
    assert opts["--topic"] == _env(services["learner"])["STREAMMOM_TOPICS__INPUT"]
    assert int(opts["--events"]) > 0 and int(opts["--rate"]) > 0
    assert producer["healthcheck"] == {"disable": True}


def _mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Bind mounts: container path -> host path (relative to the compose file)."""
    out: dict[str, Path] = {}
    for volume in service.get("volumes", []):
        src, dst = volume.split(":")[:2]
        if src.startswith((".", "/")):
            out[dst] = (COMPOSE.parent / src).resolve()
    return out


def test_bind_mounts_exist(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for dst, src in _mounts(svc).items():
            assert src.exists(), f"{name}: {src} (mounted at {dst}) missing"
    named = {v.split(":")[0] for s in compose["services"].values() for v in s.get("volumes", [])}
    named = {n for n in named if not n.startswith((".", "/"))}
    assert named <= set(compose.get("volumes", {})), named


def test_prometheus_scrapes_the_worker_and_loads_alerts(compose: dict[str, Any]) -> None:
    prom = compose["services"]["prometheus"]
    mounts = _mounts(prom)
    config_arg = next(a for a in prom["command"] if a.startswith("--config.file="))
    config_path = mounts[config_arg.split("=", 1)[1]]
    config = yaml.safe_load(config_path.read_text())
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "streammom"]
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    port = _env(compose["services"]["learner"])["STREAMMOM_HTTP__PORT"]
    assert targets == [f"{name}:{port}" for name in WORKERS]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    for rule_file in config["rule_files"]:
        assert rule_file in mounts, f"rule file {rule_file} not mounted"
        assert mounts[rule_file] == (DEPLOY / "prometheus" / "alerts.yml").resolve()


def test_grafana_provisioning(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    mounts = _mounts(grafana)
    prov = mounts["/etc/grafana/provisioning"]
    [ds_file] = list((prov / "datasources").glob("*.yaml"))
    [datasource] = yaml.safe_load(ds_file.read_text())["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    assert "9090:9090" in compose["services"]["prometheus"]["ports"]

    [dash_file] = list((prov / "dashboards").glob("*.yaml"))
    [provider] = yaml.safe_load(dash_file.read_text())["providers"]
    dash_dir = provider["options"]["path"]
    provided = {dst: src for dst, src in mounts.items() if dst.startswith(dash_dir + "/")}
    assert provided, f"nothing mounted under the provider path {dash_dir}"
    for src in provided.values():
        dashboard = json.loads(src.read_text())
        ds_var = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
        assert ds_var and ds_var[0]["current"]["value"] == datasource["uid"]
    home = _env(grafana).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    assert home is None or home in provided


def test_repo_root_build_context_is_the_repo(compose: dict[str, Any]) -> None:
    context = (COMPOSE.parent / compose["services"]["learner"]["build"]["context"]).resolve()
    assert context == REPO
