"""The compiled inner loops of the hot path, loaded on first use.

The kernels live in :mod:`streammom._compiled` (numba); importing numba takes ~0.2 s, so this
module only names them: ``_kernels.route_rows`` (or any other kernel) imports
:mod:`streammom._compiled` the first time it is looked up (PEP 562 module ``__getattr__``).
A read that needs no kernel — ``streammom inspect``, ``report`` and ``--help`` load the routing
model, never route — then never pays for the compiler.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streammom._compiled import (
        EM_CUT,
        add_packed_gram,
        add_row_sums,
        em_pass,
        packed_slice_sums,
        reservoir_offer,
        route_rows,
        unpack_packed,
    )

__all__ = ["EM_CUT", "add_packed_gram", "add_row_sums", "em_pass", "packed_slice_sums",
           "reservoir_offer", "route_rows", "unpack_packed"]


def __getattr__(name: str) -> Any:
    """A kernel (or constant) of :mod:`streammom._compiled`, imported on first use."""
    if name not in __all__:
        raise AttributeError(f"module 'streammom._kernels' has no attribute {name!r}")
    value = getattr(import_module("streammom._compiled"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
