"""The Dockerfile and its build context (no Docker engine here: lint + replay the build)."""

from __future__ import annotations

import json
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from deploy_helpers import HTTP_PORT, REPO, DockerIgnore, run, tool

DOCKERFILE = REPO / "Dockerfile"


def _instructions(text: str) -> list[tuple[str, str, int]]:
    """(INSTRUCTION, arguments, stage index) with line continuations joined."""
    joined = re.sub(r"\\\n", " ", text)
    out: list[tuple[str, str, int]] = []
    stage = -1
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            stage += 1
        out.append((word, rest.strip(), stage))
    return out


@pytest.fixture(scope="module")
def instructions() -> list[tuple[str, str, int]]:
    return _instructions(DOCKERFILE.read_text())


def test_hadolint_clean() -> None:
    result = run([tool("hadolint"), "--no-color", "Dockerfile"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_bites(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nCMD streammom run\n")
    result = run([tool("hadolint"), "--no-color", str(bad)])
    assert result.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3025"):
        assert rule in result.stdout, result.stdout


def test_structure(instructions: list[tuple[str, str, int]]) -> None:
    froms = [args for word, args, _ in instructions if word == "FROM"]
    assert len(froms) >= 2, "multi-stage build expected"
    args = {
        a.split("=", 1)[0]: a.split("=", 1)[1]
        for w, a, _ in instructions
        if w == "ARG" and "=" in a
    }
    bases = [f.split()[0] for f in froms]
    resolved = [
        re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), b) for b in bases
    ]
    for image in resolved:
        assert re.fullmatch(r"python:3\.12-slim-bookworm(@sha256:[0-9a-f]{64})?", image), image

    last = max(stage for _, _, stage in instructions)
    runtime = [(w, a) for w, a, s in instructions if s == last]
    words = [w for w, _ in runtime]
    user = [a for w, a in runtime if w == "USER"]
    assert user and user[-1].split(":")[0] == "10001"
    assert ("EXPOSE", str(HTTP_PORT)) in runtime
    assert ("STOPSIGNAL", "SIGTERM") in runtime
    assert any(w == "VOLUME" and "/var/lib/streammom" in a for w, a in runtime)
    assert any(w == "COPY" and "--from=builder" in a and "/opt/venv" in a for w, a in runtime)
    assert any(w == "COPY" and a.endswith("/etc/streammom/streammom.toml") for w, a in runtime)

    [entry] = [a for w, a in runtime if w == "ENTRYPOINT"]
    [cmd] = [a for w, a in runtime if w == "CMD"]
    assert json.loads(entry) == ["streammom"]  # exec form: PID 1 gets SIGTERM
    assert json.loads(cmd) == ["run"]

    [health] = [a for w, a in runtime if w == "HEALTHCHECK"]
    assert f"127.0.0.1:{HTTP_PORT}/healthz" in health
    assert "urllib.request" in health and "curl" not in health
    assert words.index("USER") < words.index("ENTRYPOINT")

    env = " ".join(a for w, a in runtime if w == "ENV")
    for needle in (
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
        "PATH=/opt/venv/bin:$PATH",
        "STREAMMOM_CONFIG=/etc/streammom/streammom.toml",
        "STREAMMOM_CHECKPOINT__DIR=/var/lib/streammom",
        f"STREAMMOM_HTTP__PORT={HTTP_PORT}",
    ):
        assert needle in env, needle

    builder = [(w, a) for w, a, s in instructions if s == 0]
    assert any(w == "RUN" and "python -m venv /opt/venv" in a for w, a in builder)
    assert any(w == "RUN" and re.search(r"pip install[^&]* \.(\s|$)", a) for w, a in builder)


def test_dockerignore_keeps_the_context_small() -> None:
    ignore = DockerIgnore((REPO / ".dockerignore").read_text())
    for path in (
        "pyproject.toml",
        "streammom/__init__.py",
        "service/cli.py",
        "deploy/streammom.toml",
    ):
        assert not ignore.excluded(path), path
    for path in (
        ".git/config",
        ".venv/bin/python",
        ".cache/kafka-libs/x.jar",
        "tests/deploy/test_deploy_dockerfile.py",
        "streammom/__pycache__/model.cpython-312.pyc",
        "deploy/k8s/learner.yaml",
        "bench/quality.py",
    ):
        assert ignore.excluded(path), path


def _copy_into(context: Path, src: str, dest_root: Path, dest: str) -> None:
    source = context / src.rstrip("/")
    if not source.exists():
        pytest.fail(f"COPY {src}: not in the build context (.dockerignore or missing file)")
    target = dest_root / dest.lstrip("/")
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        if dest.endswith("/"):
            target = target / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


@pytest.mark.timeout(600)
def test_build_replay_installs_the_console_script(
    tmp_path: Path, instructions: list[tuple[str, str, int]]
) -> None:
    """Replay the builder stage's COPYs from the .dockerignore-filtered context, then build.

    Catches a COPY of a file the context lacks (e.g. README.md, which pyproject.toml's
    `readme` needs) and a package that `pip install .` would not ship.
    """
    ignore = DockerIgnore((REPO / ".dockerignore").read_text())
    context = tmp_path / "context"
    for rel in ignore.context_files(REPO):
        dst = context / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dst)

    fs = tmp_path / "fs"
    workdir = "/"
    for word, args, stage in instructions:
        if word == "WORKDIR" and stage == 0:
            workdir = args
        if word != "COPY" or args.startswith("--from"):
            continue
        parts = [p for p in args.split() if not p.startswith("--")]
        *sources, dest = parts
        dest_abs = dest if dest.startswith("/") else f"{workdir.rstrip('/')}/{dest}"
        if len(sources) > 1 and not dest_abs.endswith("/"):
            dest_abs += "/"
        for src in sources:
            _copy_into(context, src, fs, dest_abs)

    src_dir = fs / "src"
    assert (src_dir / "pyproject.toml").is_file()
    assert (fs / "etc/streammom/streammom.toml").is_file()
    out = tmp_path / "wheel"
    result = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            str(out),
            str(src_dir),
        ],
        timeout=540,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [wheel] = list(out.glob("streammom-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert "service/cli.py" in names
        assert "streammom/__init__.py" in names
        [ep] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = zf.read(ep).decode()
    assert re.search(r"^streammom\s*=\s*service\.cli:main$", entry_points, re.M), entry_points
