"""Writing reports: the HTML file (atomically) and the per-figure PNG/SVG exports."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streammom.model import HierarchyModel
from streammom.report.codes import CodeMap
from streammom.report.html import ReportFigures, build_report
from streammom.report.svg import frequency_svg, heatmap_svg, tree_svg
from streammom.serialization import atomic_write_bytes

__all__ = ["export_figures", "write_report"]


def write_report(
    model: HierarchyModel,
    info: Mapping[str, Any] | None,
    path: str | os.PathLike[str],
    codes: CodeMap | str | os.PathLike[str] | None = None,
    *,
    events: str | os.PathLike[str] | None = None,
    lam: float = 0.7,
) -> Path:
    """Write the HTML report of ``model`` to ``path`` atomically (temp file, fsync, rename).

    This is the daemon's hook after a refit: readers of ``path`` always see a complete report.
    ``info`` comes from :func:`streammom.report.loader.from_engine` (live engine) or
    :func:`streammom.report.load_model` (a snapshot file); ``codes`` is ``"icd10"``, a
    ``code,name`` CSV path, a code map or ``None``.
    """
    html = build_report(model, info, codes=codes, events=events, lam=lam)
    atomic_write_bytes(path, html.encode("utf-8"))
    return Path(path)


def export_figures(
    figures: ReportFigures,
    *,
    png_dir: str | os.PathLike[str] | None = None,
    svg_dir: str | os.PathLike[str] | None = None,
    png_scale: float = 1.0,
) -> list[Path]:
    """Write ``tree``, ``frequency`` and (with events) ``heatmap`` as ``.png`` and/or ``.svg``.

    PNGs need matplotlib (the ``plot`` extra), imported only when ``png_dir`` is given.
    Returns the written paths in a fixed order.
    """
    if png_dir is not None:
        from streammom.report.png import require_matplotlib

        require_matplotlib()  # before any file is written
    written: list[Path] = []
    drawings = [("tree", figures.layout), ("frequency", figures.frequency)]
    if figures.heatmap is not None:
        drawings.append(("heatmap", figures.heatmap))
    if svg_dir is not None:
        svg_makers = {"tree": tree_svg, "frequency": frequency_svg, "heatmap": heatmap_svg}
        for name, data in drawings:
            target = Path(svg_dir) / f"{name}.svg"
            atomic_write_bytes(target, svg_makers[name](data, standalone=True).encode("utf-8"))
            written.append(target)
    if png_dir is not None:
        from streammom.report.png import frequency_png, heatmap_png, tree_png

        png_makers = {"tree": tree_png, "frequency": frequency_png, "heatmap": heatmap_png}
        for name, data in drawings:
            written.append(png_makers[name](data, Path(png_dir) / f"{name}.png", scale=png_scale))
    return written

