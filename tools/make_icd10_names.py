"""Build ``streammom/report/data/icd10cm_names.csv.gz``: ICD-10-CM code names.

Source: the PyPI package **simple-icd-10-cm 1.5.0** (MIT licence,
https://github.com/StefanoTrv/simple_icd_10_CM), whose data are the CMS ICD-10-CM tables —
public-domain US government data. Loading that package parses its XML on every import (≈ 2.4 s,
the whole cost of ``streammom inspect`` on an ICD-coded model), so streammom ships this table
instead and the package is needed only by this build tool::

    pip install simple-icd-10-cm==1.5.0
    python tools/make_icd10_names.py

Output: a gzip'd UTF-8 CSV ``code,name`` (header row), in the package's order (chapters, blocks,
categories, subcategories: every item ``is_valid_item`` accepts, dotted as the package writes
them), written deterministically (gzip mtime 0, no file name): re-running gives identical bytes.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "streammom/report/data/icd10cm_names.csv.gz"


def main() -> None:
    import simple_icd_10_cm as cm

    text = io.StringIO(newline="")
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["code", "name"])
    for code in cm.get_all_codes(True):
        writer.writerow([code, cm.get_description(code)])
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(text.getvalue().encode("utf-8"))
    OUT.write_bytes(buf.getvalue())
    print(f"wrote {OUT} ({len(buf.getvalue())} bytes)")


if __name__ == "__main__":
    main()
