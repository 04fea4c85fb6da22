"""Reports people can look at: HTML/SVG/PNG views of a model snapshot, and a terminal tree.

* :func:`load_model` — read a model archive or a streaming-engine snapshot → ``(model, info)``.
* :func:`build_report` / :func:`write_report` — one self-contained HTML file (inline SVG and
  CSS, no network): the cluster tree labelled by relevance, the feature-frequency chart, an
  event heatmap (with events) and model metadata with the lineage of recent splits.
* :func:`compute_figures` + :func:`export_figures` — the same figures as PNG (matplotlib) / SVG.
* :func:`streammom.report.terminal.render_tree` — the tree for a terminal (rich).
* :func:`load_codes` — human-readable code names: ``"icd10"``, ``"icd9"`` or a ``code,name`` CSV.

Example::

    >>> import numpy as np
    >>> from streammom.model import HierarchyModel, TreeNode
    >>> m = HierarchyModel([TreeNode(0, -1, 0, 10.0, np.array([0.5, 0.1]))], n_features=2,
    ...                    feature_names=["I509", "E119"])
    >>> html = build_report(m, codes="icd10")
    >>> 'data-node-id="0"' in html and "Heart failure, unspecified" in html
    True
"""

from streammom.report.codes import (
    CodeMap,
    CsvNames,
    DictNames,
    Icd9Names,
    Icd10Names,
    load_codes,
    resolve_codes,
)
from streammom.report.export import export_figures, write_report
from streammom.report.html import ReportFigures, build_report, compute_figures
from streammom.report.loader import from_engine, load_model, model_info

__all__ = [
    "CodeMap",
    "CsvNames",
    "DictNames",
    "Icd9Names",
    "Icd10Names",
    "ReportFigures",
    "build_report",
    "compute_figures",
    "export_figures",
    "from_engine",
    "load_codes",
    "load_model",
    "model_info",
    "resolve_codes",
    "write_report",
]
