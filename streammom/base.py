"""The base of every estimator: parameters in, ``get_params``/``set_params``/``clone``/repr out.

scikit-learn's ``BaseEstimator`` and River's ``base.Base`` are the models: ``__init__`` stores
its arguments unchanged (so :func:`sklearn.base.clone` works), hyper-parameters are declared
once in a :class:`~streammom.params.Param` table (``_parameters``), fitted attributes end in
``_``, and validation happens against the table when work starts (``fit``) or, for the
streaming engine, at construction (a stream has no single ``fit`` to wait for).

>>> from streammom import SpectralMixture
>>> est = SpectralMixture(3, em=False)
>>> est
SpectralMixture(n_components=3, em=False)
>>> est.clone().set_params(n_components=4).get_params()["n_components"]
4
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, ClassVar, Self

from streammom.params import Param, validate_params

__all__ = ["Estimator"]


class Estimator:
    """Parameter plumbing shared by :class:`~streammom.StreamingHierarchy`,
    :class:`~streammom.HierarchicalMoM` and :class:`~streammom.SpectralMixture`.

    Subclasses set ``_parameters`` (their table) and take exactly those names as keyword
    arguments of ``__init__`` (plus, for the engine, ``n_features`` and ``vocabulary``, which
    are data descriptions rather than hyper-parameters and are not in the table).
    """

    _parameters: ClassVar[tuple[Param, ...]] = ()

    @classmethod
    def _param_names(cls) -> list[str]:
        """The ``__init__`` argument names, in signature order (scikit-learn's rule)."""
        sig = inspect.signature(cls.__init__)
        return [name for name, p in sig.parameters.items()
                if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor arguments as given (scikit-learn convention; ``deep`` is accepted
        for compatibility: no parameter is itself an estimator)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Self:
        """Set constructor arguments by name; the new values are validated at once."""
        valid = set(self._param_names())
        for name in params:
            if name not in valid:
                raise ValueError(f"{type(self).__name__}: unknown parameter {name!r}; "
                                 f"valid: {', '.join(sorted(valid))}")
        table_values = {k: v for k, v in params.items() if k in self._table()}
        validate_params(type(self).__name__, self._parameters, table_values)
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def clone(self) -> Self:
        """A new, unfitted estimator with the same parameters (deep-copied)."""
        return type(self)(**copy.deepcopy(self.get_params()))

    @classmethod
    def _table(cls) -> dict[str, Param]:
        return {p.name: p for p in cls._parameters}

    def _validate_params(self) -> None:
        """Check the current parameter values against the table (raises ``ValueError``)."""
        table = self._table()
        validate_params(type(self).__name__, self._parameters,
                        {k: v for k, v in self.get_params().items() if k in table})

    def _plain_params(self) -> dict[str, Any]:
        """The table's parameters as plain JSON values (snapshots, model metadata)."""
        return {p.name: p.coerce(getattr(self, p.name)) for p in self._parameters}

    def __repr__(self) -> str:
        """``Name(arg=value, …)`` with only the arguments that differ from their defaults
        (scikit-learn's compact repr), in signature order."""
        sig = inspect.signature(type(self).__init__).parameters
        shown = []
        for name, value in self.get_params().items():
            default = sig[name].default
            if default is inspect.Parameter.empty or not _same(value, default):
                shown.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(type(a) is type(b) and a == b) or (a is b)
    except Exception:  # e.g. arrays: never equal to a scalar default
        return False
