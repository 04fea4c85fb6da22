"""Unit tests of the dev broker launcher's pure parts (no JVM started here)."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from service.devbroker import KafkaLibsNotFoundError, find_kafka_libs, new_cluster_id
from service.devbroker import libs as libs_mod
from service.devbroker._proc import group_alive, spawn_group_leader, terminate_group
from service.devbroker.broker import server_properties
from service.devbroker.testing import wait_until


def _dead(pid: int) -> bool:
    """Gone, or a zombie (an orphan's reaper may be slow or absent in containers)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_cluster_id_is_unpadded_urlsafe_base64_of_16_bytes() -> None:
    cid = new_cluster_id()
    assert len(cid) == 22 and "=" not in cid
    assert len(base64.urlsafe_b64decode(cid + "==")) == 16
    assert new_cluster_id() != cid


def test_cluster_id_never_starts_with_a_dash(monkeypatch) -> None:
    """An id like "-abc…" is parsed as an option by kafka-storage; 1 in 64 random ids is one."""
    import uuid

    dash_first = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64 "-A…": would break the format
    plain = uuid.UUID(bytes=bytes(16))
    draws = iter([dash_first, plain])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    assert base64.urlsafe_b64encode(dash_first.bytes).decode().startswith("-")
    assert new_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"


def test_server_properties_single_node_kraft(tmp_path: Path) -> None:
    props = server_properties(port=1234, controller_port=1235, log_dir=tmp_path,
                              overrides={"num.partitions": "3"})
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:1235"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:1234"
    assert props["auto.create.topics.enable"] == "false"
    assert props["offsets.topic.num.partitions"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["message.max.bytes"] == "1048588"
    assert props["num.partitions"] == "3"


def test_find_kafka_libs_uses_env_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kafka_2.13-9.9.9.jar").touch()
    monkeypatch.setenv(libs_mod.LIBS_ENV, str(tmp_path))
    assert find_kafka_libs(resolve=False) == tmp_path
    assert libs_mod.kafka_version(tmp_path) == "9.9.9"


def test_find_kafka_libs_without_jars_or_maven_explains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(libs_mod.LIBS_ENV, str(tmp_path / "missing"))
    monkeypatch.setattr(libs_mod, "maven_available", lambda: False)
    with pytest.raises(KafkaLibsNotFoundError, match="make kafka-libs"):
        find_kafka_libs()


def test_shipped_pom_and_log_config_exist() -> None:
    assert libs_mod.POM_PATH.is_file()
    assert "kafka_2.13" in libs_mod.POM_PATH.read_text()
    assert libs_mod.LOG4J2_CONFIG.is_file()


def test_spawned_child_dies_with_parent(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: a grandchild spawned by a SIGKILLed Python process dies too."""
    pidfile = tmp_path / "pid"
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from service.devbroker._proc import spawn_group_leader\n"
        "p = spawn_group_leader(['sleep', '300'], cwd=Path('.'), log=sys.stdout.buffer)\n"
        f"Path({str(pidfile)!r}).write_text(str(p.pid))\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text() != "", timeout=30,
                   what="child pid file")
        child = int(pidfile.read_text())
        assert group_alive(child)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    wait_until(lambda: _dead(child), timeout=10, what="orphan to be killed")


def test_terminate_group_escalates_to_sigkill(tmp_path: Path) -> None:
    with (tmp_path / "log").open("wb") as log:
        proc = spawn_group_leader(
            [sys.executable, "-c",
             "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print('ready', flush=True); time.sleep(300)"],
            cwd=tmp_path, log=log,
        )
        wait_until(lambda: b"ready" in (tmp_path / "log").read_bytes(), timeout=30,
                   what="child to ignore SIGTERM")
        assert terminate_group(proc, timeout=0.5) == -signal.SIGKILL
    assert not group_alive(proc.pid)
