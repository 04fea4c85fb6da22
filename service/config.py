"""Daemon configuration: pydantic-settings with nested sections, TOML file, env and CLI flags.

Precedence (lowest → highest): defaults < TOML file < environment < CLI flags.

* TOML file: ``--config FILE`` or ``STREAMMOM_CONFIG``; sections ``[kafka]``, ``[topics]``,
  ``[model]``, ``[checkpoint]``, ``[http]``, ``[limits]``, ``[worker]``.
* Environment: prefix ``STREAMMOM_``, nested delimiter ``__``, e.g.
  ``STREAMMOM_KAFKA__BOOTSTRAP_SERVERS=broker:9092``, ``STREAMMOM_TOPICS__INPUT=events``.
* CLI flags: passed as nested overrides (``streammom run --set model.max_leaves=32``).

Unknown keys are rejected everywhere (``extra="forbid"``), including inside the TOML file.
"""

from __future__ import annotations

import difflib
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from streammom import CodeRollup, StreamingHierarchy, Vocabulary
from streammom.engine_params import ENGINE_PARAMETERS
from streammom.params import Options, Param

__all__ = [
    "CheckpointSettings",
    "HttpSettings",
    "KafkaSettings",
    "LimitsSettings",
    "ModelSettings",
    "Settings",
    "TopicsSettings",
    "WorkerSettings",
    "build_engine",
    "dump_settings",
    "load_settings",
    "parse_set_overrides",
]

CONFIG_ENV = "STREAMMOM_CONFIG"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(_Section):
    """Kafka client settings (kafka-python 3)."""

    bootstrap_servers: str = "localhost:9092"
    group_id: str = "streammom"
    group_instance_id: str | None = Field(
        default=None, description="static membership id (e.g. the StatefulSet pod name)"
    )
    client_id: str = "streammom"
    session_timeout_ms: int = Field(default=6000, ge=1000)
    heartbeat_interval_ms: int = Field(default=1000, ge=100)
    max_poll_interval_ms: int = Field(default=300_000, ge=1000)
    request_timeout_ms: int = Field(default=30_000, ge=1000)
    broker_probe_timeout_ms: int = Field(
        default=5000,
        ge=500,
        description=(
            "/readyz reports the broker down when a group heartbeat sent to it has had no "
            "response for this long (a frozen broker still accepts TCP connections)"
        ),
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = (
        Field(default=None, description="needs security_protocol SASL_PLAINTEXT or SASL_SSL")
    )
    sasl_username: str | None = Field(default=None, description="PLAIN and SCRAM only")
    sasl_password: SecretStr | None = Field(default=None, description="PLAIN and SCRAM only")
    sasl_oauth_token_file: Path | None = Field(
        default=None,
        description="OAUTHBEARER: file holding the access token, re-read at every "
        "authentication (kept fresh by a sidecar or a projected volume)",
    )
    ssl_cafile: Path | None = Field(default=None, description="CA bundle (PEM) of the brokers")
    ssl_certfile: Path | None = Field(default=None, description="client certificate (PEM), mTLS")
    ssl_keyfile: Path | None = Field(default=None, description="client private key (PEM)")
    ssl_password: SecretStr | None = Field(default=None, description="password of ssl_keyfile")
    ssl_check_hostname: bool = Field(
        default=True, description="check the broker certificate's host name"
    )
    compression_type: Literal["gzip", "snappy", "lz4", "zstd"] | None = Field(
        default="zstd",
        description="producer compression of every topic the worker writes. zstd (Kafka ≥ "
        "2.1) compresses assignment records as small as gzip does at about a twelfth of the "
        "CPU (kafka-python's gzip is level 9: ~10 µs an assignment record); consumers of "
        "the output topics need zstd support "
        "(kafka-python with zstandard, librdkafka, the Java client). gzip, lz4 or none "
        "for older consumers",
    )
    linger_ms: int = Field(default=5, ge=0)
    max_request_size: int = Field(default=1_048_576, ge=1024)
    max_block_ms: int = Field(default=5000, ge=100, description="producer send() block bound")
    create_topics: bool = Field(default=True, description="create missing topics at start")
    topic_partitions: int = Field(default=1, ge=1, description="partitions of created topics")
    replication_factor: int = Field(default=1, ge=1)

    @field_validator("sasl_mechanism", mode="before")
    @classmethod
    def _upper_mechanism(cls, value: Any) -> Any:
        """Mechanism names are case-insensitive (``plain`` = ``PLAIN``)."""
        return value.strip().upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_security(self) -> KafkaSettings:
        """Reject security settings that cannot work together (or would be silently ignored),
        and missing TLS/token files, at load time rather than at the first connection."""
        errors: list[str] = []
        protocol, mechanism = self.security_protocol, self.sasl_mechanism
        sasl = protocol.startswith("SASL_")
        tls = protocol in ("SSL", "SASL_SSL")
        if sasl and mechanism is None:
            errors.append(f"security_protocol {protocol} needs sasl_mechanism")
        if mechanism is not None and not sasl:
            errors.append(f"sasl_mechanism {mechanism} needs security_protocol SASL_PLAINTEXT "
                          f"or SASL_SSL (is {protocol})")
        userpass = mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        if userpass and (not self.sasl_username or self.sasl_password is None
                         or not self.sasl_password.get_secret_value()):
            errors.append(f"sasl_mechanism {mechanism} needs sasl_username and sasl_password")
        if not userpass and (self.sasl_username is not None or self.sasl_password is not None):
            errors.append("sasl_username/sasl_password are only used by sasl_mechanism PLAIN, "
                          "SCRAM-SHA-256 or SCRAM-SHA-512")
        if mechanism == "OAUTHBEARER" and self.sasl_oauth_token_file is None:
            errors.append("sasl_mechanism OAUTHBEARER needs sasl_oauth_token_file")
        if mechanism != "OAUTHBEARER" and self.sasl_oauth_token_file is not None:
            errors.append("sasl_oauth_token_file is only used by sasl_mechanism OAUTHBEARER")
        ssl_set = [name for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password")
                   if getattr(self, name) is not None]
        if ssl_set and not tls:
            errors.append(f"{', '.join(ssl_set)} need security_protocol SSL or SASL_SSL "
                          f"(is {protocol})")
        if self.ssl_certfile is None and (self.ssl_keyfile is not None
                                          or self.ssl_password is not None):
            errors.append("ssl_keyfile/ssl_password need ssl_certfile")
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "sasl_oauth_token_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                errors.append(f"{name}: no such file: {path}")
        if errors:
            raise ValueError("kafka: " + "; ".join(errors))
        return self


class TopicsSettings(_Section):
    """Topic names."""

    input: str = "streammom.events"
    assignments: str = "streammom.assignments"
    models: str = "streammom.models"
    dead_letters: str = "streammom.events.dlq"
    frames: str = Field(default="streammom.frames", description=(
        "scale-out: the internal topic ingest workers forward valid events to (one partition: "
        "its assignment elects the active learner)"))
    learner_state: str = Field(default="streammom.learner-state", description=(
        "scale-out: the compacted topic of the learner's checkpoints (a standby learner "
        "restores from it when it takes over)"))


_NONE_WORDS = ("none", "null")


def _none_word(value: Any) -> Any:
    """``"none"``/``"null"`` (any case) → None: TOML and environment variables cannot say
    null, and ``--set model.refit_every=none`` should."""
    if isinstance(value, str) and value.strip().lower() in _NONE_WORDS:
        return None
    return value


def _field_type(param: Param) -> Any:
    """The pydantic type of one engine parameter, with the engine's own bounds."""
    kinds: list[Any] = []
    for c in param.kinds:
        if isinstance(c, Options):
            # a yes/no flag is a bool (so "false" from env or flags parses); else the values
            is_flag = set(c.values) == {True, False}
            kinds.append(bool if is_flag else Literal[c.values])  # type: ignore[valid-type]
            continue
        bounds: dict[str, Any] = {}
        if c.left is not None:
            bounds["ge" if c.lower_inclusive else "gt"] = c.left
        if c.right is not None:
            bounds["le" if c.upper_inclusive else "lt"] = c.right
        if c.kind is float:
            bounds["allow_inf_nan"] = False
        kinds.append(Annotated[c.kind, Field(**bounds)])
    union = kinds[0]
    for k in kinds[1:]:
        union = union | k
    if param.allows_none:
        return Annotated[union | None, BeforeValidator(_none_word)]
    return union


class _ModelSettingsBase(_Section):
    """The ``[model]`` settings that are not engine hyper-parameters."""

    name: str = Field(default="streammom", description="key of the models-topic message")
    vocabulary_capacity: int = Field(
        default=1024, ge=2,
        description="columns of the growing vocabulary (d): state and refit cost grow as d²; "
                    "when full, frequent new tokens take the rarest columns over at refits",
    )
    vocabulary_file: Path | None = Field(
        default=None, description="fixed vocabulary (one token per line); else growing"
    )
    code_rollup_prefix: int | None = Field(
        default=None, ge=1,
        description="roll codes up to their first N characters, dots removed (ICD-9 250.01 "
                    "→ 250 with 3); applied before the vocabulary",
    )
    code_rollup_file: Path | None = Field(
        default=None, description="code → group mapping file ('code,group' lines), applied "
                                  "before the prefix; unmapped codes pass through",
    )

    def engine_kwargs(self) -> dict[str, Any]:
        """The engine hyper-parameters, as :class:`streammom.StreamingHierarchy` keywords."""
        return {p.name: getattr(self, p.name) for p in ENGINE_PARAMETERS}


#: Engine parameters whose daemon setting differs from the library's. ``family``: every role
#: (learner, ingest workers, ``assign``) turns events into rows — 0/1 or counts — before any
#: model exists, so the daemon fixes the family in its settings; ``"auto"`` (the library's
#: default, decided by the first batch) is not offered. Its default is the daemon's use:
#: encounters are sets of diagnosis codes.
DAEMON_PARAMETER_OVERRIDES: dict[str, tuple[Any, Any, str]] = {
    "family": (Literal["bernoulli", "multinomial"], "bernoulli",
               "bernoulli: code sets (raw moments); multinomial: token counts (single-topic "
               "estimators). Fixed in the settings: every role builds rows the same way"),
}


def _model_field(p: Param) -> tuple[Any, Any]:
    if p.name in DAEMON_PARAMETER_OVERRIDES:
        kind, default, doc = DAEMON_PARAMETER_OVERRIDES[p.name]
        return kind, Field(default=default, description=doc)
    return _field_type(p), Field(default=p.default, description=p.doc)


#: ``[model]``: every :class:`streammom.StreamingHierarchy` hyper-parameter, derived from its
#: table (:data:`streammom.engine_params.ENGINE_PARAMETERS`: same names, defaults, bounds and
#: descriptions, but for :data:`DAEMON_PARAMETER_OVERRIDES`), plus the models-topic key and
#: the vocabulary.
ModelSettings = create_model(
    "ModelSettings",
    __base__=_ModelSettingsBase,
    __module__=__name__,
    **{p.name: _model_field(p) for p in ENGINE_PARAMETERS},
)
ModelSettings.__doc__ = ("Engine hyper-parameters (:class:`streammom.StreamingHierarchy`, "
                         "from its parameter table) and the vocabulary.")


def build_rollup(cfg: _ModelSettingsBase) -> CodeRollup | None:
    """The code roll-up of the model settings (``code_rollup_file`` and/or
    ``code_rollup_prefix``), or None. Every role builds the same one: ingest workers map codes
    as the learner does."""
    if cfg.code_rollup_file is not None:
        return CodeRollup.from_file(cfg.code_rollup_file, prefix=cfg.code_rollup_prefix)
    if cfg.code_rollup_prefix is not None:
        return CodeRollup(prefix=cfg.code_rollup_prefix)
    return None


def build_engine(cfg: _ModelSettingsBase) -> StreamingHierarchy:
    """A fresh :class:`streammom.StreamingHierarchy` (+ vocabulary) from the model settings."""
    rollup = build_rollup(cfg)
    if cfg.vocabulary_file is not None:
        vocab = Vocabulary.from_file(cfg.vocabulary_file, rollup=rollup)
    else:
        vocab = Vocabulary(capacity=cfg.vocabulary_capacity, rollup=rollup)
    return StreamingHierarchy(vocabulary=vocab, **cfg.engine_kwargs())


class CheckpointSettings(_Section):
    """Where and how often the state + offsets checkpoint is written."""

    dir: Path = Path("/var/lib/streammom")
    every_events: int = Field(default=50_000, ge=1)
    every_seconds: float = Field(default=30.0, gt=0)
    background: bool = Field(
        default=True,
        description="write scheduled checkpoints off the loop: the state is copied on the loop "
                    "and encoded and written by a background thread; offsets are committed "
                    "once the write is durable (revocations and shutdown write on the loop)",
    )
    on_refit: bool = Field(
        default=True,
        description="also checkpoint right after every refit: the new model is on disk "
                    "(inspect, report) and a crash does not redo the refit",
    )
    on_lost_state: Literal["rebuild", "refuse", "resume"] = Field(
        default="rebuild",
        description=(
            "no checkpoint but the consumer group has committed offsets (the state was lost): "
            "rebuild = re-learn the input from its earliest retained offsets (the state then "
            "counts every retained event once); refuse = exit 2 and leave it to the operator; "
            "resume = continue from the committed offsets with a fresh model (events before "
            "them are never learned)"
        ),
    )


class HttpSettings(_Section):
    """The metrics/health HTTP server."""

    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = Field(default=9108, ge=0, le=65535)


class LimitsSettings(_Section):
    """Input limits; violating events are dead-lettered (see :mod:`service.events`)."""

    max_message_bytes: int = Field(default=256 * 1024, ge=64)
    max_codes: int = Field(default=512, ge=1)
    max_tokens: int = Field(default=20_000, ge=1)
    max_distinct_counts: int = Field(default=5_000, ge=1)
    max_code_length: int = Field(default=64, ge=1)
    max_id_length: int = Field(default=256, ge=1)
    max_count_value: int = Field(default=1_000_000, ge=1)
    min_ts: float = Field(
        default=0.0, description="earliest accepted event time, epoch seconds (1970-01-01)"
    )
    max_ts: float = Field(
        default=4_102_444_800.0,
        description="latest accepted event time, epoch seconds (2100-01-01): epoch "
        "milliseconds sent as seconds are far beyond it and are rejected",
    )

    @model_validator(mode="after")
    def _ts_window(self) -> LimitsSettings:
        if not self.min_ts < self.max_ts:
            raise ValueError(f"limits.min_ts ({self.min_ts}) must be < max_ts ({self.max_ts})")
        return self


class WorkerSettings(_Section):
    """The consume loop."""

    id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]{1,128}$",
        description=(
            "this worker's identity; its models-topic key is '<model.name>/<id>'. Default: "
            "kafka.group_instance_id, else an id kept in the checkpoint directory (worker.id)"
        ),
    )
    role: Literal["all", "ingest", "learner"] = Field(default="all", description=(
        "all: one process consumes, learns and assigns (the default); ingest: decode, "
        "dead-letter, assign with the published model and forward frames (any number, one "
        "group); learner: the single writer of the model, learning the frames (one active, "
        "standbys in group '<kafka.group_id>.learner')"))
    batch_max_records: int = Field(default=2000, ge=1)
    poll_timeout_s: float = Field(default=0.5, gt=0, le=1.0)
    model_publish_interval_s: float = Field(default=60.0, gt=0)
    backoff_initial_s: float = Field(default=0.2, gt=0)
    backoff_max_s: float = Field(default=5.0, gt=0)
    flush_timeout_s: float = Field(default=10.0, gt=0)
    shutdown_timeout_s: float = Field(
        default=30.0, gt=0, description="give up flushing at shutdown (no checkpoint) after"
    )
    heartbeat_timeout_s: float = Field(default=60.0, gt=0, description="/healthz staleness")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "json", "console"] = Field(
        default="auto",
        description="json for log collectors, console for people; auto: console on a terminal",
    )
    blas_threads: int = Field(
        default=1, ge=1,
        description=(
            "threads of the BLAS/OpenMP pools while the worker runs (threadpoolctl), the "
            "refit helper's included: on a few cores more threads fight the loop and the "
            "Kafka client's IO thread (oversubscription). A refit itself always runs on one "
            "BLAS thread (streammom.engine.REFIT_BLAS_THREADS), so its results do not depend "
            "on this setting or on the machine's cores"
        ),
    )
    malloc_arenas: int = Field(
        default=2, ge=0,
        description=(
            "at most this many glibc malloc arenas in the daemon's process, set at start-up "
            "(MALLOC_ARENA_MAX in the environment wins; 0: glibc's default of 8 a core): "
            "memory freed by one thread is reused by the others (measured: 60 MB less peak "
            "RSS with 50,000 held events, the default; within the noise at 25,000)"
        ),
    )
    refit_process: bool = Field(
        default=True,
        description=(
            "run the engine's refits in a helper process (role all): the loop goes on "
            "while a refit runs and learns the events it read meanwhile once the refit is "
            "back, so the state is the one of refits on the loop, byte for byte; their "
            "assignments: refit_labels (docs/design.md section 6); false: refit on the loop"
        ),
    )
    refit_nice: int = Field(
        default=10, ge=0, le=19,
        description=(
            "niceness the refit helper adds to the daemon's (os.nice): the loop gets the CPU "
            "first when the machine is busy, the refit the rest; 0: the same priority "
            "(measured on 2 cores with the broker beside it: 0.75x the bare loop against "
            "0.70x, mean of 6 alternating pairs; BENCHMARKS.md)"
        ),
    )
    refit_labels: Literal["auto", "current", "after_refit"] = Field(
        default="auto",
        description=(
            "with refit_process, the assignments of the events read while a refit runs: "
            "current = at once, by the model of before the refit (the loop never waits; "
            "which events of the window get the old model depends on how long the refit "
            "took); after_refit = once the refit is back, by the model that learns them (the "
            "assignments of refits on the loop, byte for byte; the loop waits when "
            "refit_max_held_events are held); auto = current on Kafka, after_refit when "
            "replaying input that ends (embedded mode, the demo): reproducible outputs"
        ),
    )
    refit_max_held_events: int | None = Field(
        default=None, ge=1,
        description=("events read and held at most while a refit runs; then the input is "
                     "paused (the loop goes on polling) until the refit is back. Unset: "
                     "250,000 when the held events are assigned at once (refit_labels "
                     "current: each keeps only its codes, ~0.2 KB a ~10-code encounter, "
                     "~55 MB), 50,000 when their assignments wait for the refit (after_refit: "
                     "each keeps its whole record, ~1.3 KB, ~66 MB)"),
    )
    refit_max_held_features: int = Field(
        default=2_500_000, ge=1,
        description=("codes or tokens of the held events together, at most (long documents "
                     "weigh more than short encounters): past it the input is paused as past "
                     "refit_max_held_events (~20-60 B a held code or token: <= ~50-150 MB)"),
    )
    refit_timeout_s: float = Field(
        default=600.0, gt=0,
        description="a refit in the helper running longer is abandoned and done on the loop",
    )


class ReportSettings(_Section):
    """The HTML report of the current model, rewritten after every refit (operators' picture)."""

    path: Path | None = Field(default=None, description="report file; unset = no report")
    codes: str = Field(
        default="auto", description="feature names: auto, none, icd10 or a code,name CSV file"
    )


class Settings(BaseSettings):
    """The resolved daemon configuration."""

    model_config = SettingsConfigDict(
        env_prefix="STREAMMOM_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    kafka: KafkaSettings = KafkaSettings()
    topics: TopicsSettings = TopicsSettings()
    model: ModelSettings = ModelSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()
    http: HttpSettings = HttpSettings()
    limits: LimitsSettings = LimitsSettings()
    worker: WorkerSettings = WorkerSettings()
    report: ReportSettings = ReportSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_file = _CURRENT_TOML.get("path")
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)


# The TOML file of the construction in progress (set by load_settings under _TOML_LOCK).
_CURRENT_TOML: dict[str, Path | None] = {"path": None}
_TOML_LOCK = threading.Lock()


class ConfigError(ValueError):
    """The configuration file or overrides are invalid."""


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Resolve the settings: defaults < TOML (``config_file`` or ``$STREAMMOM_CONFIG``) < env
    < ``overrides`` (nested dict, e.g. from CLI flags)."""
    path = config_file if config_file is not None else os.environ.get(CONFIG_ENV) or None
    toml_path = Path(path) if path is not None else None
    if toml_path is not None and not toml_path.is_file():
        raise ConfigError(f"config file not found: {toml_path}")
    with _TOML_LOCK:
        _CURRENT_TOML["path"] = toml_path
        try:
            return Settings(**dict(overrides or {}))
        except ValidationError as exc:
            raise ConfigError(explain_validation_error(exc)) from exc
        finally:
            _CURRENT_TOML["path"] = None


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The valid names at ``loc``'s level: sections, or the keys of ``loc[0]``'s section."""
    if len(loc) <= 1:
        return list(Settings.model_fields)
    field = Settings.model_fields.get(str(loc[0]))
    model = getattr(field, "annotation", None)
    return list(getattr(model, "model_fields", {}))


def explain_validation_error(exc: ValidationError) -> str:
    """One short line per problem: where (``section.key``), what was given and what is
    expected; an unknown key gets "did you mean …?" from the valid keys (difflib)."""
    lines = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        where = ".".join(str(p) for p in loc) or "settings"
        if err.get("type") == "extra_forbidden":
            known = _known_keys(loc)
            close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            prefix = ".".join(str(p) for p in loc[:-1])
            hint = (f"; did you mean {prefix + '.' if prefix else ''}{close[0]}?" if close
                    else f"; valid: {', '.join(known)}" if len(known) <= 12 else "")
            lines.append(f"{where} is not a setting{hint}")
        else:
            given = err.get("input")
            shown = repr(given) if not isinstance(given, dict) else "a table"
            lines.append(f"{where} = {shown}: {err.get('msg', 'invalid')}")
    return "; ".join(lines)


def parse_set_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["model.max_leaves=32", "kafka.group_id=g"]`` → nested dict (values parsed as JSON
    when possible, else kept as strings)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or "." not in key:
            raise ConfigError(f"--set expects section.key=value, got {item!r}")
        section, _, name = key.strip().partition(".")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if value is None:  # kept as a word: a None override would read as "not given"
            value = raw.strip()
        out.setdefault(section, {})[name] = value
    return out


def merge_overrides(*parts: Mapping[str, Any] | None) -> dict[str, Any]:
    """Deep-merge nested override dicts (later wins); ``None`` values are skipped."""
    out: dict[str, Any] = {}
    for part in parts:
        for section, values in (part or {}).items():
            if isinstance(values, Mapping):
                for key, value in values.items():
                    if value is not None:
                        out.setdefault(section, {})[key] = value
            elif values is not None:
                out[section] = values
    return out


def dump_settings(settings: Settings, fmt: Literal["toml", "json"] = "toml") -> str:
    """The resolved settings as TOML or JSON, secrets masked."""
    data = settings.model_dump(mode="json")
    for p in ENGINE_PARAMETERS:  # None that is not the default must survive TOML (no null)
        if data["model"][p.name] is None and p.default is not None:
            data["model"][p.name] = "none"
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    return to_toml(data)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def to_toml(data: Mapping[str, Any]) -> str:
    """A minimal TOML writer for one level of tables of scalars (``None`` → commented out)."""
    lines: list[str] = []
    for section, values in data.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            if value is None:
                lines.append(f"# {key} = (unset)")
            else:
                lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)
