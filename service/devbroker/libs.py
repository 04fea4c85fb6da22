"""Locate (or resolve with Maven) the Apache Kafka broker jars used by the dev/test broker.

The jars are pinned by the POM shipped next to this module (``pom.xml``); ``make kafka-libs``
runs the same Maven command as :func:`resolve_kafka_libs`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

POM_PATH = Path(__file__).with_name("pom.xml")
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
LIBS_ENV = "STREAMMOM_KAFKA_LIBS"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_CORE_JAR_GLOB = "kafka_2.13-*.jar"


class KafkaLibsNotFoundError(RuntimeError):
    """No usable jar directory was found and it could not be resolved with Maven."""


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/streammom/kafka-libs`` (default ``~/.cache/streammom/kafka-libs``)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "streammom" / "kafka-libs"


def candidate_dirs() -> list[Path]:
    """Jar directories in lookup order: ``$STREAMMOM_KAFKA_LIBS``, ./.cache, the user cache."""
    env = os.environ.get(LIBS_ENV)
    if env:
        return [Path(env).expanduser()]
    return [Path.cwd() / ".cache" / "kafka-libs", user_cache_dir()]


def is_libs_dir(path: Path) -> bool:
    """True if ``path`` holds exactly one Kafka core jar (``kafka_2.13-<version>.jar``)."""
    return path.is_dir() and len(list(path.glob(_CORE_JAR_GLOB))) == 1


def kafka_version(libs_dir: Path) -> str:
    """The Kafka version of the core jar in ``libs_dir`` (e.g. ``"4.3.1"``)."""
    (jar,) = libs_dir.glob(_CORE_JAR_GLOB)
    return jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")


def maven_available() -> bool:
    """True if ``mvn`` is on PATH."""
    return shutil.which("mvn") is not None


def resolve_kafka_libs(dest: Path, *, timeout: float = 900.0) -> Path:
    """Resolve the POM's runtime classpath from Maven Central into ``dest`` (atomically).

    Maven copies into a sibling temp dir which is then renamed, so a concurrent resolver or a
    broker reading ``dest`` never sees a half-filled or mixed-version directory.
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaLibsNotFoundError(f"cannot resolve Kafka jars into {dest}: `mvn` not on PATH")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
    cmd = [mvn, "-B", "-q", "-f", str(POM_PATH), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0 or not is_libs_dir(tmp):
            raise KafkaLibsNotFoundError(
                f"Maven could not resolve the Kafka jars (exit {done.returncode}):\n"
                f"{' '.join(cmd)}\n{(done.stdout + done.stderr)[-4000:]}"
            )
        (tmp / ".resolved").touch()
        try:
            tmp.rename(dest)
        except OSError:  # someone else won the race (dest exists and is non-empty)
            if not is_libs_dir(dest):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def find_kafka_libs(*, resolve: bool = True) -> Path:
    """Return a directory with the broker's jars, resolving it with Maven if needed and allowed.

    Lookup: ``$STREAMMOM_KAFKA_LIBS`` (exclusively, if set), else ``./.cache/kafka-libs``, else
    ``~/.cache/streammom/kafka-libs``. If none exists and ``resolve`` is true and ``mvn`` is on
    PATH, resolves into ``$STREAMMOM_KAFKA_LIBS`` or the user cache dir.
    """
    candidates = candidate_dirs()
    for path in candidates:
        if is_libs_dir(path):
            return path
    target = candidates[0] if os.environ.get(LIBS_ENV) else user_cache_dir()
    if resolve and maven_available():
        return resolve_kafka_libs(target)
    tried = ", ".join(str(p) for p in candidates)
    raise KafkaLibsNotFoundError(
        f"no Kafka broker jars in {tried}; run `make kafka-libs` (needs Maven) "
        f"or set {LIBS_ENV} to a directory of jars"
    )
