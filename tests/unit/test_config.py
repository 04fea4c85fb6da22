"""Configuration precedence (defaults < TOML < env < CLI) and unknown-key rejection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.config import (
    ConfigError,
    dump_settings,
    load_settings,
    merge_overrides,
    parse_set_overrides,
)

pytestmark = pytest.mark.usefixtures("clean_env")


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "streammom.toml"
    path.write_text(text)
    return path


def test_defaults_match_the_deploy_contract() -> None:
    s = load_settings()
    assert s.topics.input == "streammom.events"
    assert s.topics.assignments == "streammom.assignments"
    assert s.topics.models == "streammom.models"
    assert s.topics.dead_letters == "streammom.events.dlq"
    assert str(s.checkpoint.dir) == "/var/lib/streammom"
    assert (s.http.host, s.http.port) == ("0.0.0.0", 9108)
    assert s.kafka.session_timeout_ms == 6000 and s.kafka.heartbeat_interval_ms == 1000
    assert s.worker.poll_timeout_s <= 1.0


def test_precedence_toml_env_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _toml(tmp_path, '[kafka]\nbootstrap_servers = "toml:1"\ngroup_id = "toml-g"\n'
                          'client_id = "toml-c"\n[model]\nmax_leaves = 8\n')
    s = load_settings(cfg)
    assert (s.kafka.bootstrap_servers, s.kafka.group_id, s.model.max_leaves) == (
        "toml:1", "toml-g", 8)
    monkeypatch.setenv("STREAMMOM_KAFKA__BOOTSTRAP_SERVERS", "env:2")
    monkeypatch.setenv("STREAMMOM_KAFKA__GROUP_ID", "env-g")
    monkeypatch.setenv("STREAMMOM_MODEL__MAX_LEAVES", "12")
    s = load_settings(cfg)
    assert (s.kafka.bootstrap_servers, s.kafka.group_id, s.model.max_leaves) == (
        "env:2", "env-g", 12)
    assert s.kafka.client_id == "toml-c"  # untouched keys keep the TOML value
    s = load_settings(cfg, merge_overrides({"kafka": {"group_id": "cli-g", "client_id": None}},
                                           parse_set_overrides(["model.max_leaves=20"])))
    assert (s.kafka.bootstrap_servers, s.kafka.group_id, s.model.max_leaves) == (
        "env:2", "cli-g", 20)
    assert s.kafka.client_id == "toml-c"  # None flags do not override


def test_config_file_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _toml(tmp_path, '[topics]\ninput = "in"\n')
    monkeypatch.setenv("STREAMMOM_CONFIG", str(cfg))
    assert load_settings().topics.input == "in"


def test_static_membership_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().kafka.group_instance_id is None
    monkeypatch.setenv("STREAMMOM_KAFKA__GROUP_INSTANCE_ID", "streammom-0")
    assert load_settings().kafka.group_instance_id == "streammom-0"


@pytest.mark.parametrize(
    "text",
    ['[kafka]\nbootstrap = "x"\n', '[nope]\na = 1\n', 'top_level = 1\n',
     '[model]\nmax_leaves = "many"\n', '[worker]\npoll_timeout_s = 5\n'],
)
def test_unknown_or_invalid_toml_rejected(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(_toml(tmp_path, text))
    assert "\n" not in str(err.value) and "errors.pydantic.dev" not in str(err.value)


def test_unknown_nested_env_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMMOM_KAFKA__BOOTSTRAP", "x")
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap is not a setting; did you mean "
                                          r"kafka\.bootstrap_servers\?"):
        load_settings()


@pytest.mark.parametrize(("override", "message"), [
    ("model.max_dpth=3", "model.max_dpth is not a setting; did you mean model.max_depth?"),
    ("modl.max_depth=3", "modl is not a setting; did you mean model?"),
    ("model.max_depth=abc", "model.max_depth = 'abc': Input should be a valid integer"),
    ("model.prune_fraction=0.9", "model.prune_fraction = 0.9: Input should be less than 0.5"),
])
def test_typos_and_bad_values_answer_in_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(None, parse_set_overrides([override]))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_missing_file_and_bad_set(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_settings(tmp_path / "missing.toml")
    with pytest.raises(ConfigError):
        parse_set_overrides(["max_leaves=3"])


def test_dump_masks_secrets_and_round_trips(tmp_path: Path) -> None:
    s = load_settings(overrides={"kafka": {"security_protocol": "SASL_PLAINTEXT",
                                           "sasl_mechanism": "PLAIN", "sasl_username": "u",
                                           "sasl_password": "hunter2"}})
    toml_text = dump_settings(s, "toml")
    json_text = dump_settings(s, "json")
    assert "hunter2" not in toml_text and "hunter2" not in json_text
    assert "**********" in json_text
    # the TOML output (the masked secret given again) is itself a valid config
    clean = "\n".join(line if "sasl_password" not in line else 'sasl_password = "again"'
                      for line in toml_text.splitlines())
    again = load_settings(_toml(tmp_path, clean))
    assert again.model == s.model and again.topics == s.topics
    assert json.loads(json_text)["kafka"]["sasl_username"] == "u"


def test_the_default_producer_compression_has_its_codec_installed() -> None:
    """The producers compress with zstd by default; kafka-python refuses to build a producer
    (and cannot read such a topic) without the zstandard library, so the package must bring
    it: a codec round trip through kafka-python's own functions."""
    from kafka import codec

    cfg = load_settings().kafka
    assert cfg.compression_type == "zstd"
    assert codec.has_zstd()
    payload = b'{"event_id":"e1","leaf_id":3,"path":[0,1,3]}' * 50
    packed = codec.zstd_encode(payload)
    assert len(packed) < len(payload) / 4
    assert codec.zstd_decode(packed) == payload
