"""Code roll-up: map fine codes of a hierarchical code system to coarser groups (design §2).

Clinical code systems are hierarchies: ICD-9 ``250.01`` (type 2 diabetes with complications)
sits under the category ``250``; ICD-10 ``E11.65`` under ``E11``. The papers cluster patients
on ICD-9 codes truncated to three digits (thesis §5.3, seeds digest "datasets"), which turns
~14,000 codes into ~1,000 categories: denser moments, a smaller d, clusters that read. A
:class:`CodeRollup` does that before the vocabulary looks a token up, either by a **prefix**
(drop the dots, keep the first ``prefix`` characters) or by a **mapping** (code → group, e.g.
CCS categories; codes not in the mapping are kept as they are), or both (the mapping first).

>>> r = CodeRollup(prefix=3)
>>> [r(t) for t in ["250.01", "E11.65", "V45.81", "I10"]]
['250', 'E11', 'V45', 'I10']
>>> CodeRollup(mapping={"E11.65": "diabetes"}, prefix=3)("E11.65")
'diabetes'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["CodeRollup"]

#: Largest mapping accepted (ICD-10-CM has ~74,000 codes).
MAX_MAPPING = 1_000_000
#: Tokens whose group is remembered (a stream of junk tokens cannot grow memory past this).
CACHE_LIMIT = 1 << 16


class CodeRollup:
    """Token → group before the vocabulary lookup (see the module docstring).

    Parameters
    ----------
    prefix:
        Keep the first ``prefix`` characters of a token, dots removed (None: no truncation).
    mapping:
        Explicit code → group pairs, applied first; a mapped group is not truncated again.
    """

    def __init__(self, *, prefix: int | None = None,
                 mapping: Mapping[str, str] | None = None) -> None:
        if prefix is not None and (isinstance(prefix, bool) or not isinstance(prefix, int)
                                   or prefix < 1):
            raise ValueError(f"prefix must be a positive int or None, got {prefix!r}")
        table: dict[str, str] = {}
        for code, group in (mapping or {}).items():
            if not (isinstance(code, str) and code and isinstance(group, str) and group):
                raise ValueError(f"mapping entries must be non-empty strings: {code!r} → "
                                 f"{group!r}")
            table[code] = group
        if len(table) > MAX_MAPPING:
            raise ValueError(f"mapping has {len(table)} entries, more than {MAX_MAPPING}")
        if prefix is None and not table:
            raise ValueError("a roll-up needs a prefix length or a mapping")
        self.prefix = prefix
        self.mapping = table
        self._cache: dict[str, str] = {}

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, prefix: int | None = None
                  ) -> CodeRollup:
        """A mapping file: one ``code,group`` (or tab-separated) pair per line; blank lines
        and lines starting with ``#`` are skipped; a malformed line is an error naming it."""
        table: dict[str, str] = {}
        text = Path(path).read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.replace("\t", ",").split(",")]
            if len(parts) != 2 or not all(parts):
                raise ValueError(f"{path}:{number}: expected 'code,group', got {line!r}")
            if parts[0] in table and table[parts[0]] != parts[1]:
                raise ValueError(f"{path}:{number}: {parts[0]!r} is mapped twice")
            table[parts[0]] = parts[1]
        return cls(prefix=prefix, mapping=table)

    def __call__(self, token: str) -> str:
        out = self._cache.get(token)
        if out is None:
            out = self.mapping.get(token)
            if out is None:
                out = token.replace(".", "")[: self.prefix] if self.prefix else token
                out = out or token
            if len(self._cache) < CACHE_LIMIT:
                self._cache[token] = out
        return out

    def to_manifest(self) -> dict[str, Any]:
        """Plain JSON (prefix, sorted mapping pairs), as stored in vocabulary archives."""
        return {"prefix": self.prefix, "mapping": sorted(self.mapping.items())}

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> CodeRollup:
        """Inverse of :meth:`to_manifest` (validated by the constructor)."""
        pairs = manifest.get("mapping", [])
        if not isinstance(pairs, list) or not all(
                isinstance(p, list | tuple) and len(p) == 2 for p in pairs):
            raise ValueError("roll-up mapping must be a list of [code, group] pairs")
        return cls(prefix=manifest.get("prefix"), mapping=dict(pairs))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, CodeRollup) and self.prefix == other.prefix
                and self.mapping == other.mapping)

    def __hash__(self) -> int:
        return hash((self.prefix, len(self.mapping)))

    def __repr__(self) -> str:
        return f"CodeRollup(prefix={self.prefix}, mapping={len(self.mapping)} codes)"
