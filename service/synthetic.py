"""A SYNTHETIC patient cohort over real ICD-10-CM codes (demo, sample producer, tests).

Nothing here is real patient data: patients, encounters and phenotypes are generated from a
seeded random number generator. Only the code *vocabulary* is real — ICD-10-CM codes and their
official descriptions (the bundled ICD-10-CM table, :class:`streammom.report.codes.Icd10Names`)
— so the clusters read naturally.

Hidden structure: three phenotype groups, each split into two phenotypes (a 2-level hierarchy,
six leaves). Every phenotype is a set of related codes with prevalences; the two phenotypes of a
group also share the group's codes; every patient additionally draws background codes that are
common in any population. One event = one patient's encounter (its set of codes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from streammom.report.codes import Icd10Names

__all__ = [
    "BACKGROUND",
    "GROUPS",
    "PHENOTYPES",
    "Cohort",
    "Phenotype",
    "all_codes",
    "code_description",
    "generate_cohort",
    "malformed_samples",
]

COHORT_LABEL = "SYNTHETIC cohort (generated; not real patients)"
_ICD10_CODE = re.compile(r"^[A-Z][0-9][0-9A-Z](\.[0-9A-Z]{1,4})?$")
_ICD10_NAMES = Icd10Names()


@dataclass(frozen=True)
class Phenotype:
    """A latent patient phenotype: group, name, mixing weight and code prevalences."""

    group: str
    name: str
    weight: float
    codes: dict[str, float]


#: Codes shared by both phenotypes of a group (prevalence).
GROUPS: dict[str, dict[str, float]] = {
    "cardiometabolic": {"I10": 0.70, "E78.5": 0.55, "E66.9": 0.30},
    "respiratory": {"R06.02": 0.45, "Z87.891": 0.35, "R05.9": 0.40},
    "mental health & substance use": {"F17.210": 0.35, "G47.00": 0.30, "Z91.19": 0.20},
}

PHENOTYPES: tuple[Phenotype, ...] = (
    Phenotype("cardiometabolic", "heart failure", 0.18, {
        "I50.9": 0.55, "I50.22": 0.35, "I48.91": 0.40, "I25.10": 0.45, "Z95.0": 0.15,
        "R60.0": 0.30, "Z79.01": 0.35,
    }),
    Phenotype("cardiometabolic", "diabetes & kidney", 0.22, {
        "E11.9": 0.50, "E11.22": 0.35, "E11.65": 0.35, "Z79.4": 0.40, "N18.4": 0.25,
        "N18.30": 0.30, "Z79.84": 0.30,
    }),
    Phenotype("respiratory", "COPD & asthma", 0.17, {
        "J44.1": 0.45, "J44.9": 0.40, "J45.909": 0.35, "J96.11": 0.15, "Z99.81": 0.20,
        "G47.33": 0.25,
    }),
    Phenotype("respiratory", "pneumonia & sepsis", 0.13, {
        "J18.9": 0.60, "A41.9": 0.45, "R65.20": 0.25, "J96.01": 0.30, "N17.9": 0.30,
        "E87.1": 0.25,
    }),
    Phenotype("mental health & substance use", "depression & anxiety", 0.18, {
        "F32.9": 0.50, "F33.1": 0.30, "F41.1": 0.50, "F41.9": 0.25, "F43.10": 0.15,
    }),
    Phenotype("mental health & substance use", "substance use", 0.12, {
        "F10.20": 0.50, "F11.20": 0.35, "K70.30": 0.20, "F10.239": 0.15, "Z72.0": 0.30,
    }),
)

#: Common codes anyone may carry (prevalence), independent of the phenotype.
BACKGROUND: dict[str, float] = {
    "K21.9": 0.08, "E03.9": 0.06, "Z23": 0.10, "R51.9": 0.05, "J06.9": 0.07, "N39.0": 0.05,
    "M54.50": 0.07, "H52.4": 0.04, "M17.11": 0.03, "L70.0": 0.02, "D64.9": 0.05, "R10.9": 0.05,
}


@lru_cache(maxsize=4096)
def code_description(code: str) -> str | None:
    """The ICD-10-CM description of ``code`` (None if it is not an ICD-10-CM code)."""
    if not _ICD10_CODE.match(code):
        return None
    return _ICD10_NAMES.exact(code)


def all_codes() -> list[str]:
    """Every code the generator can emit (sorted)."""
    codes = set(BACKGROUND)
    for group in GROUPS.values():
        codes |= set(group)
    for ph in PHENOTYPES:
        codes |= set(ph.codes)
    return sorted(codes)


@dataclass
class Cohort:
    """A generated cohort: per patient its code list, phenotype index and group index."""

    codes: list[list[str]]
    phenotype: np.ndarray  # (n,) index into PHENOTYPES
    group: np.ndarray  # (n,) index into list(GROUPS)
    seed: int
    start_ts: float

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def phenotype_names(self) -> list[str]:
        return [f"{p.group} / {p.name}" for p in PHENOTYPES]

    def events(self) -> Iterator[dict[str, object]]:
        """Encounter events (dicts) in stream order."""
        for i, codes in enumerate(self.codes):
            yield {
                "type": "encounter",
                "id": f"enc-{self.seed}-{i:07d}",
                "entity_id": f"pt-{self.seed}-{i:07d}",
                "ts": self.start_ts + float(i),
                "codes": codes,
            }

    def matrix(self) -> tuple[sp.csr_array, list[str]]:
        """The cohort as a binary patient × code matrix over :func:`all_codes` (and the codes)."""
        codes = all_codes()
        column = {c: i for i, c in enumerate(codes)}
        rows = np.repeat(np.arange(len(self.codes)), [len(cs) for cs in self.codes])
        cols = np.fromiter((column[c] for cs in self.codes for c in cs), dtype=np.int64,
                           count=rows.size)
        X = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(len(self.codes), len(codes)))
        X.sum_duplicates()
        return X, codes

    def event_bytes(self) -> Iterator[bytes]:
        """The events as compact JSON bytes (one Kafka message / JSONL line each)."""
        dumps = json.dumps
        for event in self.events():
            yield dumps(event, separators=(",", ":")).encode()


def _probability_matrix(codes: list[str]) -> np.ndarray:
    index = {c: i for i, c in enumerate(codes)}
    groups = list(GROUPS)
    P = np.zeros((len(PHENOTYPES), len(codes)))
    for k, ph in enumerate(PHENOTYPES):
        for c, p in BACKGROUND.items():
            P[k, index[c]] = p
        for c, p in GROUPS[ph.group].items():
            P[k, index[c]] = p
        for c, p in ph.codes.items():
            P[k, index[c]] = p
        assert ph.group in groups
    return P


def generate_cohort(n_patients: int = 30_000, *, seed: int = 0,
                    start_ts: float = 1_767_225_600.0) -> Cohort:
    """Generate ``n_patients`` synthetic patients (vectorised; ~0.1 s for 30,000)."""
    if n_patients < 1:
        raise ValueError("n_patients must be >= 1")
    rng = np.random.default_rng(seed)
    codes = all_codes()
    P = _probability_matrix(codes)
    weights = np.array([p.weight for p in PHENOTYPES])
    z = rng.choice(len(PHENOTYPES), size=n_patients, p=weights / weights.sum())
    X = rng.random((n_patients, len(codes))) < P[z]
    # every patient carries at least their phenotype's most prevalent code
    empty = ~X.any(axis=1)
    if empty.any():
        top = np.array([codes.index(max(p.codes, key=p.codes.get)) for p in PHENOTYPES])
        X[np.flatnonzero(empty), top[z[empty]]] = True
    rows, cols = np.nonzero(X)
    split = np.searchsorted(rows, np.arange(1, n_patients))
    names = np.array(codes, dtype=object)
    code_lists = [list(part) for part in np.split(names[cols], split)]
    group_names = list(GROUPS)
    group = np.array([group_names.index(p.group) for p in PHENOTYPES])[z]
    return Cohort(codes=code_lists, phenotype=z, group=group, seed=seed, start_ts=start_ts)


def malformed_samples() -> list[tuple[str, bytes]]:
    """One malformed message per dead-letter reason (for tests and ``--malformed-every``)."""
    # > the default 256 KiB event limit, < the broker's 1 MiB message limit (so it can be sent)
    big = json.dumps({"type": "encounter", "id": "big", "entity_id": "p", "ts": 1.0,
                      "codes": ["X" * 60] * 5_000}).encode()
    return [
        ("not_utf8", b"\xff\xfe\xfa not utf-8"),
        ("invalid_json", b'{"type": "encounter", "id": '),
        ("unknown_type", b'{"type": "lab_result", "id": "x1", "ts": 1.0}'),
        ("schema", b'{"type": "encounter", "id": "x2", "entity_id": "p", "ts": "yesterday", '
                   b'"codes": ["I10"]}'),
        ("empty", b'{"type": "encounter", "id": "x3", "entity_id": "p", "ts": 1.0, "codes": []}'),
        ("oversized", big),
    ]
