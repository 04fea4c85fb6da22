"""The ``streammom`` command line (typer).

One error layer (:func:`main`): a user mistake — a missing or unreadable file, a port in use,
an invalid configuration or snapshot — is one ``error: …`` line and exit status 2; anything
else is one ``error: internal error …`` line and exit 1. ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from streammom import __version__

app = typer.Typer(no_args_is_help=True, help="streammom: streaming method-of-moments clustering.",
                  rich_markup_mode=None, pretty_exceptions_enable=False)
_DEBUG = {"on": False}


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"streammom {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
) -> None:
    """streammom: streaming method-of-moments clustering."""
    _DEBUG["on"] = debug


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"streammom {__version__}")


@app.command()
def dev_broker(
    port: Annotated[int, typer.Option(help="PLAINTEXT port on 127.0.0.1 (0 = a free one).")] = 0,
    data_dir: Annotated[
        Path | None, typer.Option(help="Persistent data dir (default: temp dir, deleted).")
    ] = None,
) -> None:
    """Run a local Apache Kafka broker (KRaft, 127.0.0.1) until Ctrl-C."""
    from service.devbroker import serve  # lazy: keeps `streammom --help` fast

    raise typer.Exit(serve(port=port, data_dir=data_dir))


# --------------------------------------------------------------------------- daemon commands
# Thin wrappers: the logic lives in service/commands/*.py (imported lazily: fast --help).
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML config file (else $STREAMMOM_CONFIG).",
                 exists=True, dir_okay=False),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a setting: section.key=value (repeatable)."),
]
config_app = typer.Typer(no_args_is_help=True, help="Inspect the resolved configuration.",
                         rich_markup_mode=None, pretty_exceptions_enable=False)
app.add_typer(config_app, name="config")


def _settings(config: Path | None, sets: list[str] | None, **flags: dict) -> Any:
    from service.config import ConfigError, load_settings, merge_overrides, parse_set_overrides

    try:
        return load_settings(config, merge_overrides(flags, parse_set_overrides(sets)))
    except (ConfigError, ValueError) as exc:
        typer.echo(f"invalid configuration: {exc}", err=True)
        raise typer.Exit(2) from exc


@app.command()
def run(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    input: Annotated[str | None, typer.Option("--input", "-i",
                     help="Embedded mode: JSONL events file or '-' (stdin); no broker.")] = None,
    output: Annotated[str | None, typer.Option("--output", "-o",
                      help="Embedded mode: assignments JSONL file or '-' (stdout).")] = None,
    dead_letters: Annotated[str | None, typer.Option(
        help="Embedded mode: dead-letter JSONL file (original bytes base64 + headers).")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap servers.")] = None,
    group_id: Annotated[str | None, typer.Option(help="Kafka consumer group.")] = None,
    checkpoint_dir: Annotated[Path | None, typer.Option(help="Checkpoint directory.")] = None,
    http_port: Annotated[int | None, typer.Option(help="Metrics/health port.")] = None,
    serve_http: Annotated[bool | None, typer.Option(
        "--serve-http/--no-serve-http", help="Serve /metrics etc. (default: Kafka mode only).")
    ] = None,
    role: Annotated[str | None, typer.Option(
        help="worker.role: all (one process, the default), ingest or learner (scale-out).")
    ] = None,
) -> None:
    """Run the daemon: Kafka in → assignments/models/dead letters out (or JSONL files)."""
    from service.commands.run import run_daemon

    settings = _settings(config, sets, kafka={"bootstrap_servers": bootstrap_servers,
                                              "group_id": group_id},
                         checkpoint={"dir": checkpoint_dir}, http={"port": http_port},
                         worker={"role": role})
    raise typer.Exit(run_daemon(settings, input_path=input, output=output,
                                dead_letters=dead_letters, serve_http=serve_http))


CsvColumnOpt = Annotated[str | None, typer.Option(
    "--csv-column", help="CSV/TSV input: the column holding the codes (header name or 0-based "
    "index); default: every cell of a row is a code and there is no header.")]
CsvSeparatorOpt = Annotated[str | None, typer.Option(
    "--csv-separator", help="CSV/TSV input: split the codes column on this (e.g. ';').")]


def _csv_layout(column: str | None, separator: str | None) -> Any:
    from service.commands.offline import CsvLayout

    if column is None and separator is None:
        return None
    target: str | int | None = int(column) if column is not None and column.isdigit() else column
    return CsvLayout(column=target, separator=separator)


ProgressOpt = Annotated[bool | None, typer.Option(
    "--progress/--no-progress", help="Progress bar on stderr (default: on a terminal).")]


def _progress_on(flag: bool | None) -> bool:
    from service.commands.progress import show_progress

    return show_progress() if flag is None else flag


@app.command()
def fit(
    input: Annotated[str, typer.Argument(help="Events JSONL, or CSV (a row of codes per event).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Snapshot file to write.")],
    config: ConfigOpt = None,
    sets: SetOpt = None,
    batch_size: Annotated[int, typer.Option(min=1)] = 5000,
    progress: ProgressOpt = None,
    csv_column: CsvColumnOpt = None,
    csv_separator: CsvSeparatorOpt = None,
) -> None:
    """Fit a fresh engine on a file (batch) and write its snapshot."""
    import json

    from service.commands.offline import fit_file

    s = _settings(config, sets)
    summary = fit_file(input, str(output), s.model, batch_size=batch_size, limits=s.limits,
                       progress=_progress_on(progress),
                       csv_layout=_csv_layout(csv_column, csv_separator))
    typer.echo(json.dumps(summary))


@app.command()
def assign(
    snapshot: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                             help="Engine snapshot, checkpoint or model file.")],
    input: Annotated[str, typer.Argument(help="Events JSONL (or CSV of codes), '-' = stdin.")],
    output: Annotated[str, typer.Option("--output", "-o", help="Assignments JSONL.")] = "-",
    progress: ProgressOpt = None,
    csv_column: CsvColumnOpt = None,
    csv_separator: CsvSeparatorOpt = None,
) -> None:
    """Assign events to leaves with a snapshot's model (no learning)."""
    import json

    from service.commands.offline import assign_file
    from streammom.serialization import SnapshotFormatError

    try:
        counts = assign_file(str(snapshot), input, output, progress=_progress_on(progress),
                             csv_layout=_csv_layout(csv_column, csv_separator))
    except SnapshotFormatError as exc:
        typer.echo(f"error: {snapshot}: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(json.dumps(counts), err=True)


MaxBytesOpt = Annotated[int | None, typer.Option(
    "--max-bytes", min=1,
    help="Refuse a snapshot that expands to more bytes than this (default 4 GiB; lower it "
         "for files from elsewhere).")]


@app.command()
def inspect(
    snapshot: Annotated[Path, typer.Argument(
        help="Engine snapshot, checkpoint or model file.")],
    top: Annotated[int, typer.Option(min=1, help="Top features per node.")] = 5,
    codes: Annotated[str | None, typer.Option(
        help="Feature names: auto (ICD-10-CM or ICD-9-CM when the codes look like it), none, "
             "icd10, icd9, or a code,name CSV file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a tree.")] = False,
    max_bytes: MaxBytesOpt = None,
) -> None:
    """Show a snapshot's hierarchy with weights and top features (relevance) and their names.

    A missing, unreadable or invalid file gives one ``error:`` line and exit status 2.
    """
    from service.commands.report import inspect_snapshot
    from streammom.serialization import DEFAULT_MAX_BYTES

    raise typer.Exit(inspect_snapshot(snapshot, codes, as_json, top=top,
                                      max_bytes=max_bytes or DEFAULT_MAX_BYTES))


@app.command()
def demo(
    patients: Annotated[int, typer.Option(min=100, help="Synthetic patients.")] = 30_000,
    seed: Annotated[int, typer.Option(help="Cohort seed.")] = 0,
    progress: ProgressOpt = None,
) -> None:
    """Stream a SYNTHETIC ICD-10-CM cohort through the daemon loop (no broker) and report."""
    from service.commands.demo import print_demo, run_demo

    print_demo(run_demo(patients, seed=seed, progress=_progress_on(progress)))


@app.command()
def produce_sample(
    events: Annotated[int, typer.Option(min=1, help="Number of valid events.")] = 10_000,
    bootstrap: Annotated[str | None, typer.Option(
        "--bootstrap-servers", "--bootstrap", help="Kafka bootstrap HOST:PORT.")] = None,
    topic: Annotated[str, typer.Option(help="Kafka topic.")] = "streammom.events",
    output: Annotated[str | None, typer.Option(help="Write JSONL here instead ('-' = stdout).")
                      ] = None,
    rate: Annotated[float, typer.Option(min=0, help="Events per second (0 = unlimited).")] = 0.0,
    seed: Annotated[int, typer.Option()] = 0,
    malformed_every: Annotated[int, typer.Option(
        min=0, help="Insert a malformed message after every N events (0 = never).")] = 0,
    timeout: Annotated[float, typer.Option(
        min=0.1, help="Seconds to wait for the broker (first contact, acknowledgements).")
    ] = 30.0,
) -> None:
    """Produce synthetic encounter events (SYNTHETIC cohort) to Kafka or a file."""
    from service.commands.produce import produce_sample as produce

    if output is None and bootstrap is None:
        typer.echo("error: give --bootstrap-servers (Kafka) or --output (file)", err=True)
        raise typer.Exit(2)
    n = produce(events=events, topic=topic, bootstrap=bootstrap, output=output, rate=rate,
                seed=seed, malformed_every=malformed_every, timeout_s=timeout,
                progress=_progress_on(None) and output != "-")
    typer.echo(f"produced {n} messages", err=True)


@app.command()
def report(
    snapshot: Annotated[Path, typer.Argument(help="Model archive, engine snapshot or checkpoint.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="HTML file to write.")],
    events: Annotated[Path | None, typer.Option(help="Events JSONL: adds a heatmap.")] = None,
    codes: Annotated[str, typer.Option(help="auto, none, icd10, icd9 or a code,name CSV.")
                     ] = "auto",
    lam: Annotated[float, typer.Option(min=0.0, max=1.0, help="Relevance λ.")] = 0.7,
    png: Annotated[Path | None, typer.Option(help="Also write the figures as PNG here.")] = None,
    svg: Annotated[Path | None, typer.Option(help="Also write the figures as SVG here.")] = None,
    max_bytes: MaxBytesOpt = None,
) -> None:
    """Write a self-contained HTML report (tree, frequency chart, heatmap) of a snapshot.

    A missing, unreadable or invalid file gives one ``error:`` line and exit status 2.
    """
    from service.commands.report import run_report
    from streammom.serialization import DEFAULT_MAX_BYTES

    raise typer.Exit(run_report(snapshot, output, events=events, codes=codes, lam=lam,
                                png_dir=png, svg_dir=svg, progress=_progress_on(None),
                                max_bytes=max_bytes or DEFAULT_MAX_BYTES))


@app.command()
def schema() -> None:
    """Print the JSON Schema of input events."""
    import json

    from service.events import event_json_schema

    typer.echo(json.dumps(event_json_schema(), indent=2))


@config_app.command("show")
def config_show(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="toml or json.")] = "toml",
) -> None:
    """Print the resolved configuration (defaults < TOML < env < flags), secrets masked."""
    from service.config import dump_settings

    if fmt not in ("toml", "json"):
        raise typer.BadParameter("--format must be toml or json")
    typer.echo(dump_settings(_settings(config, sets), fmt))  # type: ignore[arg-type]


def _one_line(exc: BaseException) -> str:
    """The error as one line: the message (a file error names its file), whitespace folded."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _is_user_mistake(exc: BaseException) -> bool:
    from service.commands.offline import InputFormatError
    from service.config import ConfigError
    from streammom.serialization import SnapshotFormatError

    return isinstance(exc, OSError | ConfigError | SnapshotFormatError | UnicodeDecodeError
                      | InputFormatError)


def main() -> None:
    """Console-script entry point: the one error layer (module docstring)."""
    try:
        app()  # standalone: usage errors, --help and exit codes are click's (SystemExit)
    except Exception as exc:
        if _DEBUG["on"]:
            raise
        if _is_user_mistake(exc):
            print(f"error: {_one_line(exc)}", file=sys.stderr)
            sys.exit(2)
        print(f"error: internal error: {type(exc).__name__}: {_one_line(exc)} "
              "(run with --debug for the traceback)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
