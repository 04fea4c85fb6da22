"""Hyper-parameter tables: one declaration per parameter, with its default and bounds.

Each estimator declares its parameters once, as a tuple of :class:`Param` (scikit-learn's
``_parameter_constraints`` is the model). The table is the single source of

* validation (:func:`validate_params`, called by the estimators with their current values),
* the JSON form stored in snapshots (:meth:`Param.coerce`: ``int``/``float``/``str``/None),
* the daemon's settings (``service.config`` derives its ``[model]`` section from
  :data:`streammom.engine.StreamingHierarchy` 's table: same names, defaults and bounds).

>>> depth = Param("max_depth", 4, (Interval(int, 0, 64),), "levels below the root")
>>> validate_params("Demo", (depth,), {"max_depth": 3})
>>> validate_params("Demo", (depth,), {"max_depth": 99})
Traceback (most recent call last):
streammom.params.InvalidParameterError: Demo: max_depth must be an int in [0, 64], got 99
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Literal

__all__ = ["FLAG", "Interval", "InvalidParameterError", "Options", "Param", "validate_params"]

Closed = Literal["both", "left", "right", "neither"]


class InvalidParameterError(ValueError, TypeError):
    """A hyper-parameter outside its table's constraints (a wrong value or a wrong type:
    both a ``ValueError`` and a ``TypeError``, as scikit-learn's error of the same name)."""


@dataclass(frozen=True)
class Interval:
    """Numbers of one kind (``int`` or ``float``) in an interval; None bounds are open-ended.

    ``closed`` says which bounds belong to the interval (scikit-learn's ``Interval``).
    Booleans are never numbers here, and floats must be finite.
    """

    kind: type
    left: float | None = None
    right: float | None = None
    closed: Closed = "both"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if self.kind is int:
            if not isinstance(value, Integral):
                return False
        elif not isinstance(value, Real) or not math.isfinite(float(value)):
            return False
        if self.left is not None and (value < self.left or (
                value == self.left and not self.lower_inclusive)):
            return False
        return self.right is None or not (value > self.right or (
            value == self.right and not self.upper_inclusive))

    @property
    def lower_inclusive(self) -> bool:
        return self.closed in ("both", "left")

    @property
    def upper_inclusive(self) -> bool:
        return self.closed in ("both", "right")

    def __str__(self) -> str:
        name = "an int" if self.kind is int else "a finite number"
        if self.left is None and self.right is None:
            return name
        lo = "(-inf" if self.left is None else ("[" if self.lower_inclusive else "(") + _num(
            self.left)
        hi = "inf)" if self.right is None else _num(self.right) + (
            "]" if self.upper_inclusive else ")")
        return f"{name} in {lo}, {hi}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (strings, or ``(True, False)`` for a flag); the type must
    match too, so ``1`` is not ``True``."""

    values: tuple[str | bool, ...]

    def accepts(self, value: Any) -> bool:
        return any(type(value) is type(v) and value == v for v in self.values)

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


Constraint = Interval | Options | None

#: A boolean switch.
FLAG = Options((True, False))


@dataclass(frozen=True)
class Param:
    """One hyper-parameter: name, default, accepted values (any of ``constraints``; ``None``
    in the tuple means None is accepted) and a one-line description."""

    name: str
    default: Any
    constraints: tuple[Constraint, ...]
    doc: str

    def accepts(self, value: Any) -> bool:
        return any(value is None if c is None else c.accepts(value) for c in self.constraints)

    @property
    def allows_none(self) -> bool:
        return None in self.constraints

    @property
    def kinds(self) -> tuple[Interval | Options, ...]:
        """The constraints other than None."""
        return tuple(c for c in self.constraints if c is not None)

    def coerce(self, value: Any) -> Any:
        """The plain JSON value of an accepted ``value`` (numpy scalars → int/float)."""
        if value is None:
            return None
        for c in self.kinds:
            if c.accepts(value):
                if isinstance(c, Interval):
                    return int(value) if c.kind is int else float(value)
                return value
        raise ValueError(f"{self.name}={value!r} is not accepted")

    def describe(self) -> str:
        """What is accepted, in words (used in error messages)."""
        text = " or ".join(str(c) for c in self.kinds)
        return f"{text} or None" if self.allows_none else text


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def validate_params(owner: str, table: Iterable[Param], values: Mapping[str, Any]) -> None:
    """Check every value in ``values`` against ``table``.

    Raises :class:`InvalidParameterError` naming the estimator, the parameter, what is
    accepted and the value given.
    """
    params = {p.name: p for p in table}
    for name, value in values.items():
        param = params.get(name)
        if param is None:
            raise InvalidParameterError(f"{owner}: unknown parameter {name!r}")
        if not param.accepts(value):
            raise InvalidParameterError(
                f"{owner}: {name} must be {param.describe()}, got {value!r}")
