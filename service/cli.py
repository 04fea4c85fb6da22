"""The ``streammom`` command line (typer)."""

from __future__ import annotations

from typing import Annotated

import typer

from streammom import __version__

app = typer.Typer(no_args_is_help=True, help="streammom: streaming method-of-moments clustering.")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"streammom {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """streammom: streaming method-of-moments clustering."""


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"streammom {__version__}")


def main() -> None:
    """Console-script entry point."""
    app()
