"""The two data families of the estimators, and their names (design §2).

* ``"bernoulli"``: binary data (code sets), raw moments;
* ``"multinomial"``: token counts, the single-topic estimators.

Kept apart from :mod:`streammom.estimators` (which re-exports them) so that readers of a model —
routing, top features, ``inspect`` — need neither scipy nor the estimator math.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["FAMILIES", "FAMILY_OPTIONS", "Family", "FamilyOption", "check_family"]

Family = Literal["bernoulli", "multinomial"]
FAMILIES: tuple[Family, ...] = ("bernoulli", "multinomial")
#: What an estimator's ``family`` accepts: a family, or ``"auto"``
#: (:func:`streammom.estimators.resolve_family`).
FamilyOption = Literal["auto", "bernoulli", "multinomial"]
FAMILY_OPTIONS: tuple[FamilyOption, ...] = ("auto", "bernoulli", "multinomial")


def check_family(family: object) -> Family:
    """Return ``family`` if it is one of :data:`FAMILIES`, else raise ``ValueError``.

    >>> check_family("multinomial")
    'multinomial'
    """
    if family == "bernoulli":
        return "bernoulli"
    if family == "multinomial":
        return "multinomial"
    raise ValueError(f"family must be 'bernoulli' or 'multinomial', got {family!r}")
