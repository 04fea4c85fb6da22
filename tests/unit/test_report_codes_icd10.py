"""The bundled ICD-10-CM table (streammom/report/data/icd10cm_names.csv.gz) names codes exactly
as the package it was built from does: same items, same fallback to the closest ancestor."""

from __future__ import annotations

import random

import simple_icd_10_cm as cm

from streammom.report.codes import Icd10Names, detect_codes


def _package_name(code: str) -> str | None:
    """The lookup streammom did through simple-icd-10-cm before the table was bundled."""
    raw = code.strip().upper()
    if not raw:
        return None
    if cm.is_valid_item(raw):
        return str(cm.get_description(raw))
    key = raw.replace(".", "")
    while len(key) >= 3:
        for candidate in (key, f"{key[:3]}.{key[3:]}" if len(key) > 3 else key):
            if cm.is_valid_item(candidate):
                return str(cm.get_description(candidate))
        key = key[:-1]
    return None


def test_bundled_table_names_codes_as_the_package_does() -> None:
    codes = cm.get_all_codes(True)
    rng = random.Random(0)
    sample = rng.sample(codes, 4000)
    probe = (sample + [c.replace(".", "") for c in sample] + [c + "X9" for c in sample[:500]]
             + ["i50.9", " I509 ", "ZZZ", "C123", "", "1", "22", "a00-a09", "U07.1"])
    names = Icd10Names()
    assert [names.name(c) for c in probe] == [_package_name(c) for c in probe]
    assert sum(names.name(c) is not None for c in probe) > 8000


def test_detection_uses_the_table() -> None:
    assert isinstance(detect_codes(["I50.9", "E11.9", "J44.9"]), Icd10Names)
