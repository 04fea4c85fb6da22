"""``streammom report`` (HTML/PNG/SVG views of a snapshot) and ``inspect`` (tree in a terminal).

The views themselves live in :mod:`streammom.report`; this module opens the files the daemon
writes (model archives, engine snapshots and daemon checkpoints), resolves ``--codes``
(``auto`` by default: ICD-10-CM / ICD-9-CM names when the features look like such codes), and
turns errors into one clear line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TextIO

from service.commands.progress import status
from service.snapshots import load_for_report
from streammom.report import build_report, compute_figures, export_figures, resolve_codes
from streammom.report.png import require_matplotlib
from streammom.serialization import DEFAULT_MAX_BYTES, atomic_write_bytes

__all__ = ["inspect_snapshot", "run_report"]

EXIT_USAGE = 2


# What a bad file, path or option can raise while loading and rendering; every such failure
# becomes one ``error:`` line and exit status 2, never a traceback.
_FAILURES = (OSError, ValueError, RuntimeError, LookupError, TypeError, AttributeError,
             MemoryError)


def _fail(message: str | BaseException, err: TextIO | None = None) -> int:
    if isinstance(message, MemoryError):
        message = f"out of memory: {message}"
    text = " ".join(str(message).split()) or type(message).__name__  # always one line
    print(f"error: {text}", file=err or sys.stderr)
    return EXIT_USAGE


def run_report(
    snapshot: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    events: str | os.PathLike[str] | None = None,
    codes: str | None = None,
    lam: float = 0.7,
    png_dir: str | os.PathLike[str] | None = None,
    svg_dir: str | os.PathLike[str] | None = None,
    sample: int = 400,
    seed: int = 0,
    err: TextIO | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: bool = False,
) -> int:
    """Write the HTML report of ``snapshot`` to ``output`` (+ PNG/SVG exports); exit status.

    Any failure (missing or unreadable file, invalid or hostile snapshot, bad option) prints
    one ``error: …`` line on ``err`` and returns 2; ``output`` is then not written.
    ``progress`` shows what is being done on stderr (a spinner per step).
    """
    err = err or sys.stderr
    try:
        if png_dir is not None:
            require_matplotlib()  # before anything is written
        with status(f"reading {snapshot}", progress):
            model, info = load_for_report(snapshot, max_bytes=max_bytes)
            code_map = resolve_codes(codes, model.feature_names)
        with status("sampling events and laying out the figures", progress):
            from service.commands.offline import event_sample_items  # the engine's config

            items = None if events is None else event_sample_items(events)
            figures = compute_figures(
                model, codes=code_map, events=items, lam=lam, sample=sample, seed=seed
            )
        with status(f"writing {output}", progress):
            html = build_report(model, info, figures=figures)
            atomic_write_bytes(output, html.encode("utf-8"))
            written = [Path(output)]
            if png_dir is not None or svg_dir is not None:
                written += export_figures(figures, png_dir=png_dir, svg_dir=svg_dir)
    except _FAILURES as exc:
        return _fail(exc, err)
    heat = f", heatmap of {figures.heatmap.n_rows} events" if figures.heatmap else ""
    print(
        f"report of model v{model.version} ({len(model.nodes)} nodes, {model.n_leaves} leaves"
        f"{heat}): " + ", ".join(str(p) for p in written),
        file=err,
    )
    return 0


def inspect_snapshot(
    path: str | os.PathLike[str],
    codes: str | None = None,
    json_output: bool = False,
    *,
    top: int = 5,
    lam: float = 0.7,
    out: TextIO | None = None,
    err: TextIO | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> int:
    """Print a snapshot's tree (rich) or its JSON summary; return the exit status.

    This is what ``streammom inspect SNAPSHOT [--codes …] [--json] [--top N] [--max-bytes N]``
    runs. Any failure (missing, unreadable or directory path, invalid or hostile snapshot —
    see :func:`load_for_report`) prints one ``error: …`` line on ``err`` and returns 2.
    """
    from streammom.report.terminal import render_tree, tree_summary

    out = out or sys.stdout
    try:
        model, info = load_for_report(path, max_bytes=max_bytes)
        code_map = resolve_codes(codes, model.feature_names)
        if json_output:
            text = json.dumps(tree_summary(model, info, code_map, top, lam=lam), indent=2,
                              sort_keys=False) + "\n"
        else:
            tree = render_tree(model, info, code_map, top, lam=lam)
    except _FAILURES as exc:
        return _fail(exc, err)
    if json_output:
        out.write(text)
        return 0
    from rich.console import Console

    tty = hasattr(out, "isatty") and out.isatty()
    console = Console(file=out, width=None if tty else 160)
    console.print(tree)
    return 0
